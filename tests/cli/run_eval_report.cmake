# The whole loop as a user drives it: `kiln run` (embedded quickstart, small) trains and leaves a
# checkpoint and metrics in its run directory; `kiln eval --policy CHECKPOINT` evaluates it through
# the pool; `kiln report` turns the run directory into HTML + Markdown.
file(REMOVE_RECURSE ${OUT}/loop_runs)
# Small tasks train fast: 16 episodes in batches of 4 give PPO updates and several progress rows,
# so the report has curves to draw.
execute_process(COMMAND ${KILN} run --set tasks.max_tasks=4 --set eval.after_max_tasks=2
                  --set rollout.episodes=16 --set rollout.max_tasks=2 --set learner.sft_candidates=2
                  --set learner.batch_size=4 --set metrics.tensorboard=true
                  --set rollout.progress_s=0.5
                  --set run.out_dir=${OUT}/loop_runs --set pool.cache_dir=${OUT}/kernel_cache
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT "${out}${err}" MATCHES "learner: checkpoint")
  message(FATAL_ERROR "kiln run exited ${rc}:\n${out}\n${err}")
endif()
# Every episode samples from published weights (after sft): none is refused as version -1.
if("${out}${err}" MATCHES "learner refused")
  message(FATAL_ERROR "the learner refused trajectories of the run:\n${err}")
endif()
file(GLOB run_dir ${OUT}/loop_runs/quickstart-*)
foreach(f summary.json eval.json rollout.jsonl learner.jsonl checkpoints/latest
          checkpoints/untrained.pt)
  if(NOT EXISTS ${run_dir}/${f})
    message(FATAL_ERROR "the run directory lacks ${f}")
  endif()
endforeach()
# The quickstart ends with what was learned: untrained, trained and expert on the training tasks.
if(NOT out MATCHES "what was learned" OR NOT out MATCHES "train +trained +[0-9]+%")
  message(FATAL_ERROR "kiln run printed no 'what was learned' table:\n${out}")
endif()
# Every run ends with its report's path as the last line, the page beside the metrics.
string(STRIP "${out}" out_stripped)
if(NOT out_stripped MATCHES "report: [^\n]*/report.html$" OR NOT EXISTS ${run_dir}/report.html)
  message(FATAL_ERROR "kiln run did not end with its report's path:\n${out}")
endif()
file(READ ${run_dir}/report.html page)
if(NOT page MATCHES "<polyline" OR NOT page MATCHES "What was learned")
  message(FATAL_ERROR "the run's report.html has no curves or no 'What was learned'")
endif()
# [metrics] tensorboard: event files a reader of the published format accepts, CRCs and all.
file(GLOB events ${run_dir}/tensorboard/events.out.tfevents.*)
execute_process(COMMAND ${PYTHON} ${SOURCE}/tests/tools/read_tfevents.py ${events}
                  --expect rollout/pass_rate rollout/mean_reward learner/loss
                RESULT_VARIABLE rc OUTPUT_VARIABLE tb)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the run's TensorBoard events do not read back:\n${tb}")
endif()
file(READ ${run_dir}/summary.json summary)
string(JSON expert_speed GET "${summary}" learned train expert speed_vs_expert)
if(NOT expert_speed MATCHES "^1(\\.0*)?$")
  message(FATAL_ERROR "summary.json 'learned': the expert's speed vs itself is ${expert_speed}")
endif()
file(GLOB ckpt ${run_dir}/checkpoints/ckpt-v*.pt)
list(GET ckpt 0 ckpt)
execute_process(COMMAND ${KILN} eval --policy ${ckpt} --max-tasks 1
                  --suite ${SOURCE}/data/suites/level1/cpu --cache-dir ${OUT}/kernel_cache
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT out MATCHES "tasks 1 +pass")
  message(FATAL_ERROR "kiln eval --policy ${ckpt} exited ${rc}:\n${out}\n${err}")
endif()
execute_process(COMMAND ${KILN} report ${run_dir} --out ${OUT}/loop_report.html
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
file(READ ${OUT}/loop_report.html html)
if(NOT rc EQUAL 0 OR NOT html MATCHES "<polyline" OR NOT html MATCHES "Evaluation: expert")
  message(FATAL_ERROR "kiln report exited ${rc}:\n${out}\n${err}")
endif()
