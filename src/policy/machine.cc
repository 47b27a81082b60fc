// policy/machine.cc — describes the machine a benchmark report was measured on
// (policy/report.h): CPU brand, kernel path, OpenMP threads, hostname.
#include <omp.h>
#include <unistd.h>

#include "mxtrain/isa.h"
#include "mxtrain/policy/report.h"

namespace mxtrain::policy {

Machine current_machine() {
  Machine m;
  m.cpu = cpu_features().brand;
  m.isa = isa_name(active_isa());
  m.threads = omp_get_max_threads();
  char host[256] = {0};
  if (::gethostname(host, sizeof(host) - 1) == 0) m.hostname = host;
  return m;
}

}  // namespace mxtrain::policy
