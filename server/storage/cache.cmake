# batchd_shard_cache: the bounded local cache of whole remote shards
# (shard_cache.h), built on the ObjectStore interface. Included from
# server/CMakeLists.txt; kept apart from storage/CMakeLists.txt, which
# builds the libcurl store (batchd_storage).
add_library(batchd_shard_cache
  ${CMAKE_CURRENT_LIST_DIR}/counting_object_store.cc
  ${CMAKE_CURRENT_LIST_DIR}/shard_cache.cc)
target_include_directories(batchd_shard_cache PUBLIC ${PROJECT_SOURCE_DIR})
target_link_libraries(batchd_shard_cache PUBLIC
  batchd_proto absl::status absl::statusor absl::strings absl::str_format
  absl::synchronization absl::time absl::flat_hash_map absl::flat_hash_set
  Threads::Threads)

batchd_cc_test(shard_cache_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/shard_cache_test.cc
  DEPS batchd_shard_cache)
