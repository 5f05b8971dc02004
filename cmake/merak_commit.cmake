# Writes OUT (a header defining MERAK_GIT_COMMIT) from `git describe` of
# SRC, at every build; the file changes only when the commit does, so
# nothing recompiles otherwise. Outside a git checkout: "unknown".
execute_process(COMMAND git describe --always --dirty --abbrev=12
  WORKING_DIRECTORY "${SRC}" OUTPUT_VARIABLE commit OUTPUT_STRIP_TRAILING_WHITESPACE
  ERROR_QUIET RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR commit STREQUAL "")
  set(commit "unknown")
endif()
set(text "#define MERAK_GIT_COMMIT \"${commit}\"\n")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
endif()
if(NOT "${old}" STREQUAL "${text}")
  file(WRITE "${OUT}" "${text}")
endif()
