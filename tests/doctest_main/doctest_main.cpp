// The one doctest main of every doctest program (shim, recorder and reliability tests), built once
// as tests/doctest_main/meson.build's doctest_main_dep.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
