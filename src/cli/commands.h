// cli/commands.h — how subcommands plug into the `mxtrain` program.
//
// Each src/cli/cmd_*.cc file defines one subcommand (or a group) and registers itself with
// MXT_REGISTER_COMMAND. main.cc builds the CLI11 app, lets every registered command add its
// subcommand and options, parses, and runs the chosen one. A command returns the process
// exit code; mxtrain::Error escaping a command becomes one "error: ..." line and exit code 1.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

namespace mxtrain::cli {

// Adds a subcommand to `app` and returns the function to run when it was chosen.
// `run` is called only when `sub->parsed()`.
struct Command {
  std::string name;
  std::function<void(CLI::App& app)> setup;  // adds the subcommand and its options
};

std::vector<Command>& registry();

struct Registrar {
  Registrar(std::string name, std::function<void(CLI::App&)> setup) {
    registry().push_back({std::move(name), std::move(setup)});
  }
};

// A parent subcommand shared by several files (e.g. `bench` holds `bench quantize`,
// `bench linear`, `bench fsdp`): the first caller creates it, later callers find it, so
// registration order does not matter. The group requires one of its subcommands.
CLI::App* group(CLI::App& app, const std::string& name, const std::string& description);

// The exit code a subcommand's callback sets (default 0).
int& exit_code();

}  // namespace mxtrain::cli

#define MXT_CLI_CONCAT2(a, b) a##b
#define MXT_CLI_CONCAT(a, b) MXT_CLI_CONCAT2(a, b)
// MXT_REGISTER_COMMAND("quantize", [](CLI::App& app) { auto* sub = app.add_subcommand(...);
//   ... sub->callback([=] { ...; mxtrain::cli::exit_code() = rc; }); });
#define MXT_REGISTER_COMMAND(name, setup_fn) \
  static ::mxtrain::cli::Registrar MXT_CLI_CONCAT(mxt_cmd_registrar_, __LINE__)(name, setup_fn)
