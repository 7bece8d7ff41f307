// doctest's main for the recorder unit tests (tests/unit/recorder_*_test.cpp).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
