#!/usr/bin/env bash
# Installs the Debian packages mxtrain needs to build, test and train (idempotent). The Python
# packages of the cross-checks and peers (PyTorch 2, torchao, transformers, ml_dtypes) come from
# PyPI into a virtual environment: scripts/pyenv.sh, which the test command runs.
set -euo pipefail
# ocl-icd-opencl-dev is only a Recommends of libdnnl-dev, but Debian's dnnl-config.cmake calls
# find_package(OpenCL) and fails without it, so it is listed here by name.
# The fuzz build (scripts/fuzz.sh) uses clang-14 with libFuzzer. clang-14 does not pull in
# libomp-14-dev (OpenMP for clang), and llvm-14 (llvm-symbolizer, for readable sanitizer
# stacks) comes only through its Recommends llvm-14-dev, so both are listed by name.
PKGS=(build-essential cmake ninja-build pkg-config
      libdnnl-dev ocl-icd-opencl-dev libopenmpi-dev openmpi-bin
      nlohmann-json3-dev libyaml-cpp-dev libcli11-dev libsentencepiece-dev
      libgtest-dev libgmock-dev libbenchmark-dev
      fortunes python3 iproute2 time
      python3-dev pybind11-dev python3-numpy python3-venv
      clang-14 libclang-rt-14-dev libfuzzer-14-dev libomp-14-dev llvm-14)
# iproute2 (ip netns, veth, bridge) makes the hosts of tests/mpi/hosts_mpi.sh; time is
# /usr/bin/time, the OS's peak RSS of every benchmark run (scripts/bench.sh).
# pybind11-dev does not depend on python3-dev (Python.h), so both are listed; python3-venv
# (ensurepip) makes the cross-check environment.
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
