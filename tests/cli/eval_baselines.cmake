# `kiln eval --baselines`: a baselines file keyed by the content hash that `kiln tasks validate
# --json` reports turns the compile metrics from "n/a" into numbers.
set(task ${SOURCE}/data/suites/level1/cpu/relu.toml)
execute_process(COMMAND ${KILN} tasks validate --timing-runs 1 ${task} --json ${OUT}/relu_validate.json
                RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
file(READ ${OUT}/relu_validate.json rows)
string(REGEX MATCH "\"content_hash\":\"([0-9a-f]+)\"" _ "${rows}")
if(NOT rc EQUAL 0 OR NOT CMAKE_MATCH_1)
  message(FATAL_ERROR "validate gave no content hash (${rc}): ${rows}")
endif()
# A torch.compile time far above any kernel: the expert must count as faster than compile.
file(WRITE ${OUT}/baselines.json "{\"kiln_baselines\": 1, \"device\": \"test\", \"torch\": \"0\", \"tasks\": {\"${CMAKE_MATCH_1}\": {\"task\": \"relu\", \"compile_ms\": 100000}}}")
execute_process(COMMAND ${KILN} eval --policy expert --suite ${task} --baselines ${OUT}/baselines.json
                  --cache-dir ${OUT}/kernel_cache --json ${OUT}/eval_baselines.json
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT out MATCHES "vs torch.compile \\(1 tasks\\): fast_1 100.0%")
  message(FATAL_ERROR "kiln eval --baselines exited ${rc}:\n${out}\n${err}")
endif()
# Measured on another device than the pool's: said, on stderr with the other logs.
if(NOT err MATCHES "were measured on 'test', this pool times on 'cpu'")
  message(FATAL_ERROR "kiln eval --baselines did not warn about the baselines' device:\n${err}")
endif()
