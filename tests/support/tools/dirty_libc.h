// dirty_libc.c: the C library's calls made to leave errno set when they succeed
// (FERRUM_TEST_DIRTY_LIBC=N), for fault_program's own interposers to share.
#pragma once

#ifdef __cplusplus
extern "C" {
#endif

// Leaves the mark in errno after a call that succeeded, when the mark is set.
void dirty_libc_after(int succeeded);

#ifdef __cplusplus
}
#endif
