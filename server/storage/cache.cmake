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

# IsRemoteUrl, MakeObjectStore and ResolveShardObjects: the real store when
# batchd_storage is built, otherwise a stub that says UNIMPLEMENTED
# (object_store_stub.cc, to be deleted with the store's arrival).
add_library(batchd_object_store_stub ${CMAKE_CURRENT_LIST_DIR}/object_store_stub.cc)
target_include_directories(batchd_object_store_stub PUBLIC ${PROJECT_SOURCE_DIR})
target_link_libraries(batchd_object_store_stub PUBLIC
  batchd_proto absl::status absl::statusor absl::strings)
add_library(batchd_object_store_impl INTERFACE)
target_link_libraries(batchd_object_store_impl INTERFACE
  $<IF:$<TARGET_EXISTS:batchd_storage>,batchd_storage,batchd_object_store_stub>)

batchd_cc_test(shard_cache_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/shard_cache_test.cc
  DEPS batchd_shard_cache)
