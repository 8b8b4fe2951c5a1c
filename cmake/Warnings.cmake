# Project-wide warnings; third-party headers come in as SYSTEM includes and stay quiet.
function(deepinfer_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor
                                           -Wimplicit-fallthrough -Werror=return-type)
endfunction()
