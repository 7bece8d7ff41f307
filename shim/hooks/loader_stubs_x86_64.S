/* The dynamic-loader entry points the shim exports: dlsym, dlvsym and dlopen.
 *
 * Why assembly: glibc resolves dlsym(RTLD_NEXT/RTLD_DEFAULT, ...) and dlvsym likewise
 * relative to the *caller's return address*, and dlopen uses it to pick the caller's
 * RUNPATH and namespace. A C wrapper would make every such lookup look like ours: other
 * interposers asking for "the next" symbol would find the wrong one and can recurse forever
 * (a known crash class). So each stub ends in a genuine tail jump into the C library, with
 * the caller's return address still on the stack. Only lookups on an explicit handle, which
 * do not depend on the caller, go through C++ (loader_hooks.cpp) to be inspected.
 *
 * x86-64 System V: arguments in rdi, rsi, rdx; rsp is 8 mod 16 at entry.
 */
#if !defined(__x86_64__)
#error "loader_stubs_x86_64.S is for x86-64 only"
#endif

    .text

/* Saves the argument registers, calls a hidden C++ function that returns the C library's
 * definition, restores them and jumps there (or returns null if there is none). */
.macro TAIL_JUMP_TO_LIBC resolver
    pushq %rdi
    .cfi_adjust_cfa_offset 8
    pushq %rsi
    .cfi_adjust_cfa_offset 8
    pushq %rdx
    .cfi_adjust_cfa_offset 8              /* three pushes: rsp is 16-aligned for the call */
    call \resolver
    popq %rdx
    .cfi_adjust_cfa_offset -8
    popq %rsi
    .cfi_adjust_cfa_offset -8
    popq %rdi
    .cfi_adjust_cfa_offset -8
    testq %rax, %rax
    jz 9f
    jmp *%rax
9:  ret                                   /* rax is null: no C library definition */
.endm

    .globl dlsym
    .type dlsym, @function
dlsym:
    .cfi_startproc
    cmpq $-1, %rdi                        /* RTLD_NEXT */
    je 1f
    testq %rdi, %rdi                      /* RTLD_DEFAULT */
    je 1f
    jmp ferrum_dlsym_on_handle            /* explicit handle: inspect the result */
1:  TAIL_JUMP_TO_LIBC ferrum_libc_dlsym_address
    .cfi_endproc
    .size dlsym, .-dlsym

    .globl dlvsym
    .type dlvsym, @function
dlvsym:
    .cfi_startproc
    cmpq $-1, %rdi
    je 1f
    testq %rdi, %rdi
    je 1f
    jmp ferrum_dlvsym_on_handle
1:  TAIL_JUMP_TO_LIBC ferrum_libc_dlvsym_address
    .cfi_endproc
    .size dlvsym, .-dlvsym

    .globl dlopen
    .type dlopen, @function
dlopen:
    .cfi_startproc
    TAIL_JUMP_TO_LIBC ferrum_dlopen_prologue  /* notes RTLD_DEEPBIND, returns libc's dlopen */
    .cfi_endproc
    .size dlopen, .-dlopen

    .section .note.GNU-stack,"",@progbits
