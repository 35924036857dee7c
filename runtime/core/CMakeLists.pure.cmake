# shardrt_core_pure: the runtime core's modules that need no context, MPI or
# device — rng (initialisation), data (the loader), lrsched, ckpt
# (checkpoints), safetensors (the strict reader ckpt uses), hf (Hugging Face
# weights: the naming table, --init's slice reader), tok (tokenizer.json for
# --sample), metrics (progress, JSONL, trace), cli (the trainer's command
# line) — and their unit
# tests (tests/unit/rt_test_*.c, label unit).
#
# Included from the top-level CMakeLists.txt after add_library(shardc_core)
# and enable_testing():
#     include(runtime/core/CMakeLists.pure.cmake)
# It also adds ckpt.c, safetensors.c and hf.c to shardc_core: `shardc export`
# and `shardc ckpt verify` read checkpoints, and export names by hf.c's table.

set(SRT_PURE_DIR ${CMAKE_CURRENT_LIST_DIR})
get_filename_component(SRT_PURE_ROOT ${CMAKE_CURRENT_LIST_DIR}/../.. ABSOLUTE)

add_library(shardrt_core_pure STATIC
  ${SRT_PURE_DIR}/rng.c ${SRT_PURE_DIR}/data.c ${SRT_PURE_DIR}/lrsched.c
  ${SRT_PURE_DIR}/ckpt.c ${SRT_PURE_DIR}/safetensors.c ${SRT_PURE_DIR}/hf.c ${SRT_PURE_DIR}/metrics.c
  ${SRT_PURE_DIR}/tok.c ${SRT_PURE_DIR}/cli.c)
target_include_directories(shardrt_core_pure PUBLIC ${SRT_PURE_DIR} ${SRT_PURE_ROOT}/runtime/include
  ${CJSON_INC})
target_link_libraries(shardrt_core_pure PUBLIC ${CJSON_LIB} m)
set_target_properties(shardrt_core_pure PROPERTIES C_STANDARD 11 C_EXTENSIONS ON
  POSITION_INDEPENDENT_CODE ON)
# Initialising a model draws a Philox block per two parameters: optimised in
# every build type, so a Debug trainer does not start ten times slower.
set_source_files_properties(${SRT_PURE_DIR}/rng.c PROPERTIES COMPILE_OPTIONS "-O2")

# `shardc export` and `shardc ckpt` (compiler/export.c) read checkpoints
# through ckpt.c and safetensors.c, and name the weights by hf.c's table.
target_sources(shardc_core PRIVATE ${SRT_PURE_DIR}/ckpt.c ${SRT_PURE_DIR}/safetensors.c ${SRT_PURE_DIR}/hf.c)

foreach(name rng data lrsched ckpt safetensors tok metrics cli)
  add_executable(rt_test_${name} ${SRT_PURE_ROOT}/tests/unit/rt_test_${name}.c)
  target_link_libraries(rt_test_${name} PRIVATE shardrt_core_pure)
  add_test(NAME unit/rt_test_${name} COMMAND rt_test_${name} WORKING_DIRECTORY ${SRT_PURE_ROOT})
  set_tests_properties(unit/rt_test_${name} PROPERTIES LABELS unit TIMEOUT 120)
endforeach()

# The export test links the compiler (export.c + ckpt.c) and checks the file
# in Python (/usr/bin/python3 with numpy and torch; skipped, exit 77, without).
add_executable(rt_test_export ${SRT_PURE_ROOT}/tests/unit/rt_test_export.c)
target_link_libraries(rt_test_export PRIVATE shardc_core)
target_include_directories(rt_test_export PRIVATE ${SRT_PURE_DIR})
add_test(NAME unit/rt_test_export COMMAND rt_test_export WORKING_DIRECTORY ${SRT_PURE_ROOT})
set_tests_properties(unit/rt_test_export PROPERTIES LABELS unit TIMEOUT 120 SKIP_RETURN_CODE 77)
