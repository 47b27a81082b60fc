// cli/main.cc — the `mxtrain` program: global options, subcommand registry, error reporting.
//
// Global option --isa forces a kernel path (same as MXTRAIN_ISA). Subcommands live in
// cmd_*.cc files (see commands.h); every option's value is checked strictly (cli/values.h).
// An error — a bad command line included — ends the program with one `error: ...` line and
// status 1; under mpirun with several ranks it ends every rank (MPI_Abort), with the failing
// rank's message, so the other ranks never wait forever in a collective the failed one will
// not join. --help (and --help-all) print the usage and exit 0.
#include <malloc.h>

#include <algorithm>
#include <cstdio>
#include <exception>

#include "cli/commands.h"
#include "cli/values.h"
#include "mxtrain/common.h"
#include "mxtrain/dist/comm.h"
#include "mxtrain/gemm.h"
#include "mxtrain/isa.h"

namespace mxtrain::cli {
std::vector<Command>& registry() {
  static std::vector<Command> r;
  return r;
}
CLI::App* group(CLI::App& app, const std::string& name, const std::string& description) {
  // CLI11 2.1 has no get_subcommand_no_throw(): look the name up in the filtered list.
  auto found = app.get_subcommands([&](CLI::App* a) { return a->get_name() == name; });
  if (!found.empty()) return found.front();
  CLI::App* g = app.add_subcommand(name, description);
  g->require_subcommand(1);
  return g;
}
int& exit_code() {
  static int code = 0;
  return code;
}
}  // namespace mxtrain::cli

int main(int argc, char** argv) {
  using namespace mxtrain;
  // An error line shows at most this many characters of its message (the values in it are
  // cut at their own source; this bounds whatever was not).
  constexpr size_t kMaxErrorChars = 2000;
  // Blocks of 1 MiB and more are mapped and unmapped on their own, so freeing one returns it to
  // the OS. glibc's default raises that threshold after each large free (up to 32 MiB), after
  // which large buffers freed and made again (FSDP's gathered weights, reshard after forward)
  // stay in the heap and the process grows (docs/distributed.md, "Memory").
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
  CLI::App app{"mxtrain — MXFP8 low-precision training engine for x86-64 CPUs and MPI"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Show help for every subcommand");
  std::string isa;
  app.add_option("--isa", isa, "Force a kernel path: scalar, avx2, avx512 or avx512vbmi (default: "
                               "the best the CPU supports; also MXTRAIN_ISA)");
  app.parse_complete_callback([&] {
    if (!isa.empty()) set_isa(parse_isa(isa));
    gemm_shapes();  // a bad MXTRAIN_GEMM_SHAPES is refused before any work starts
    stream_rows_override();  // and a bad MXTRAIN_STREAM_ROWS
  });
  auto& cmds = cli::registry();
  std::sort(cmds.begin(), cmds.end(), [](auto& a, auto& b) { return a.name < b.name; });
  for (auto& c : cmds) c.setup(app);
  cli::strict_values(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == int(CLI::ExitCodes::Success)) return app.exit(e);  // --help
    std::string what = e.what();
    std::replace(what.begin(), what.end(), '\n', ' ');
    std::fprintf(stderr, "error: %s (see --help)\n", shown(what, kMaxErrorChars).c_str());
    return 1;
  } catch (const dist::CollectiveError& e) {  // raised by every rank: each says it and ends
    const dist::Comm& w = dist::Comm::world();
    const std::string what = shown(e.what(), kMaxErrorChars);
    if (w.size() > 1) std::fprintf(stderr, "rank %d: error: %s\n", w.rank(), what.c_str());
    else std::fprintf(stderr, "error: %s\n", what.c_str());
    return 1;
  } catch (const std::exception& e) {
    const std::string what = shown(e.what(), kMaxErrorChars);
    dist::abort_world_if_distributed(what);  // several MPI ranks: does not return
    std::fprintf(stderr, "error: %s\n", what.c_str());
    return 1;
  }
  return cli::exit_code();
}
