# tools/torch_baselines.py --fidelity-only on the cpu suites: the PyTorch translation of every task
# (the code torch.compile baselines are measured on) must reproduce Kiln's reference digests; and a
# task with an unknown op must fail by name while the others still pass.
#   cmake -DPYTHON=/usr/bin/python3 -DKILN=build/kiln -DSOURCE=. -DOUT=build/tests
#         [-DVALIDATED=rows.jsonl] -P torch_fidelity.cmake
# Prints "SKIP: ..." (register with SKIP_REGULAR_EXPRESSION "SKIP: ") when PYTHON has no torch.
foreach(v PYTHON KILN SOURCE OUT)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "torch_fidelity.cmake: -D${v}=... is required")
  endif()
endforeach()
execute_process(COMMAND ${PYTHON} -c "import torch, tomllib" RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
if(NOT rc EQUAL 0)
  message("SKIP: ${PYTHON} cannot import torch and tomllib (install python3-torch, Python >= 3.11)")
  return()
endif()
set(tool ${SOURCE}/tools/torch_baselines.py)
set(suites --suite ${SOURCE}/data/suites/level1/cpu --suite ${SOURCE}/data/suites/level2/cpu
           --suite ${SOURCE}/data/suites/level3/cpu)
set(validated)
if(DEFINED VALIDATED)
  set(validated --validated ${VALIDATED}) # rows of an earlier `kiln tasks validate --digest`
endif()
execute_process(COMMAND ${PYTHON} ${tool} --fidelity-only --device cpu --threads 2 --kiln ${KILN}
                  ${suites} ${validated} --report ${OUT}/torch_fidelity.json
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT out MATCHES "188 tasks: fidelity 188 ok, 0 mismatch, 0 error")
  string(REGEX MATCH "[0-9]+ tasks: fidelity.*" tail "${out}")
  message(FATAL_ERROR "torch_baselines.py --fidelity-only exited ${rc}:\n${tail}\n${err}")
endif()
execute_process(COMMAND ${PYTHON} ${tool} --fidelity-only --device cpu --threads 2 --kiln ${KILN}
                  --suite ${SOURCE}/tests/cli/bad_tasks
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 1 OR NOT out MATCHES "unknown_op: error: [^\n]*task 'unknown_op': ops\\[0\\] \\(relux -> 'y'\\): op: unknown op 'relux'"
   OR NOT out MATCHES "3 tasks: fidelity 2 ok, 0 mismatch, 1 error")
  message(FATAL_ERROR "bad_tasks: wanted exit 1 naming op 'relux', got ${rc}:\n${out}\n${err}")
endif()
