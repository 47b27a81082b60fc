# tests/mpi/expect_success.cmake — runs an MPI program that must succeed and checks its output:
# exit status 0 within 90 s and the regular expression EXPECT somewhere in stdout + stderr
# (CTest's PASS_REGULAR_EXPRESSION alone would ignore the exit status).
# cmake -DMPIEXEC=... -DNP=... -DEXE=... -DARGS="a;b;c" -DEXPECT=... -P expect_success.cmake
execute_process(
  COMMAND ${MPIEXEC} --allow-run-as-root --oversubscribe -np ${NP} ${EXE} ${ARGS}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 90)
message("${out}${err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "expected exit status 0, got ${rc}")
endif()
if(NOT "${out}${err}" MATCHES "${EXPECT}")
  message(FATAL_ERROR "the output lacks a match for ${EXPECT}")
endif()
message("ok: exit status 0, output matches ${EXPECT}")
