# tests/mpi/expect_failure.cmake — runs an MPI program that must fail and checks how it failed:
# it ends within 90 s with a non-zero exit status, "rank <r>: error: <EXPECT>" printed by every
# rank 0..NP-1 (or by the ranks listed in RANKS), and (if given) EXPECT2 somewhere in the output.
# cmake -DMPIEXEC=... -DNP=... -DEXE=... -DEXPECT=... [-DRANKS=0] -P expect_failure.cmake
execute_process(
  COMMAND ${MPIEXEC} --allow-run-as-root --oversubscribe -np ${NP} ${EXE}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 90)
message("${out}${err}")
if(NOT rc MATCHES "^[0-9]+$")
  message(FATAL_ERROR "did not end: ${rc}")
endif()
if(rc EQUAL 0)
  message(FATAL_ERROR "expected a non-zero exit status, got 0")
endif()
if(NOT DEFINED RANKS)
  math(EXPR last "${NP} - 1")
  foreach(r RANGE 0 ${last})
    list(APPEND RANKS ${r})
  endforeach()
endif()
foreach(r ${RANKS})
  string(FIND "${out}${err}" "rank ${r}: error: ${EXPECT}" pos)
  if(pos EQUAL -1)
    message(FATAL_ERROR "rank ${r} did not report \"error: ${EXPECT}\" (exit status ${rc})")
  endif()
endforeach()
if(DEFINED EXPECT2)
  string(FIND "${out}${err}" "${EXPECT2}" pos)
  if(pos EQUAL -1)
    message(FATAL_ERROR "the message lacks \"${EXPECT2}\"")
  endif()
endif()
message("ok: exit status ${rc}, ranks ${RANKS} reported the error")
