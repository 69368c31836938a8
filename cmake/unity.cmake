# Relocatable unity builds.
#
# CMake's own unity sources (CMAKE_UNITY_BUILD) include each file by its absolute path. ccache
# in direct mode hashes a source's text, so a clone in another folder (CI's) never hits the
# work tree's objects in that mode and pays a preprocessor run per batch to hit them in the
# preprocessed mode. CMake 3.32 has UNITY_BUILD_RELOCATABLE for this; Debian 12 has 3.25. So
# tessera writes the batches itself, as CMake would (the same order, the same batch size, the
# same SKIP_UNITY_BUILD_INCLUSION property), with each file included by its path relative to the
# batch's own folder: the text of a batch is the same in every clone.
#
# tessera_unity_build(BATCH_SIZE) runs once, after every target is defined: it walks the
# folders, and for each library and executable puts its C++ sources into batches
# <build folder>/unity/<target>_<n>.cc (a target of one source gets a batch of one, so its
# object too is the same in every clone).

function(tessera_unity_targets dir out)
  get_property(targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
  get_property(subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
  foreach(sub IN LISTS subdirs)
    tessera_unity_targets(${sub} sub_targets)
    list(APPEND targets ${sub_targets})
  endforeach()
  set(${out} ${targets} PARENT_SCOPE)
endfunction()

function(tessera_unity_batch_target target batch_size)
  get_target_property(type ${target} TYPE)
  if(NOT type MATCHES "^(EXECUTABLE|STATIC_LIBRARY|SHARED_LIBRARY|OBJECT_LIBRARY)$")
    return()
  endif()
  get_target_property(source_dir ${target} SOURCE_DIR)
  get_target_property(binary_dir ${target} BINARY_DIR)
  get_target_property(sources ${target} SOURCES)
  set(batched)
  # Source file properties are looked up by absolute path: a relative one would be taken
  # relative to this file's folder, not the target's.
  foreach(src IN LISTS sources)
    if(NOT src MATCHES "\\.cc$")
      continue()
    endif()
    cmake_path(ABSOLUTE_PATH src BASE_DIRECTORY ${source_dir} OUTPUT_VARIABLE path)
    if(NOT EXISTS ${path})
      cmake_path(ABSOLUTE_PATH src BASE_DIRECTORY ${binary_dir} OUTPUT_VARIABLE path)  # generated
    endif()
    get_source_file_property(skip ${path} TARGET_DIRECTORY ${target} SKIP_UNITY_BUILD_INCLUSION)
    if(NOT skip)
      list(APPEND batched ${path})
    endif()
  endforeach()
  if(NOT batched)
    return()
  endif()
  set(unity_dir ${binary_dir}/unity)
  set(batch_sources)
  set(text "")
  set(in_batch 0)
  set(batch 0)
  foreach(path IN LISTS batched)
    file(RELATIVE_PATH relative ${unity_dir} ${path})
    string(APPEND text "#include \"${relative}\"\n")
    # The original stays listed (IDEs, dependency scanning) but is compiled through its batch.
    set_source_files_properties(${path} TARGET_DIRECTORY ${target}
                                PROPERTIES HEADER_FILE_ONLY ON)
    math(EXPR in_batch "${in_batch} + 1")
    if(in_batch EQUAL batch_size)
      tessera_unity_write(${unity_dir}/${target}_${batch}.cc "${text}")
      list(APPEND batch_sources ${unity_dir}/${target}_${batch}.cc)
      set(text "")
      set(in_batch 0)
      math(EXPR batch "${batch} + 1")
    endif()
  endforeach()
  if(in_batch GREATER 0)
    tessera_unity_write(${unity_dir}/${target}_${batch}.cc "${text}")
    list(APPEND batch_sources ${unity_dir}/${target}_${batch}.cc)
  endif()
  target_sources(${target} PRIVATE ${batch_sources})
endfunction()

# Writes `path` only when its text changes, so a re-configure does not rebuild every batch.
function(tessera_unity_write path text)
  set(text "/* A unity batch written by cmake/unity.cmake. */\n${text}")
  if(EXISTS ${path})
    file(READ ${path} old)
    if(old STREQUAL text)
      return()
    endif()
  endif()
  file(WRITE ${path} "${text}")
endfunction()

function(tessera_unity_build batch_size)
  tessera_unity_targets(${CMAKE_SOURCE_DIR} targets)
  foreach(target IN LISTS targets)
    tessera_unity_batch_target(${target} ${batch_size})
  endforeach()
endfunction()
