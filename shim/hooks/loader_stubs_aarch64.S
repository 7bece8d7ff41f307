/* The dynamic-loader entry points the shim exports on aarch64 (Grace Hopper): dlsym, dlvsym
 * and dlopen. Same contract as loader_stubs_x86_64.S, whose comment says why these are
 * assembly: glibc resolves RTLD_NEXT/RTLD_DEFAULT (and dlopen's RUNPATH and namespace)
 * relative to the caller's return address — on aarch64 the link register x30 at entry — so
 * each stub restores x30 and ends in a plain branch (br), never a call.
 *
 * AAPCS64: arguments in x0, x1, x2; x16 is an intra-procedure-call scratch register.
 */
#if !defined(__aarch64__)
#error "loader_stubs_aarch64.S is for aarch64 only"
#endif

    .text

/* Saves the argument registers and the frame, calls a hidden C++ function that returns the
 * C library's definition, restores everything (x30 included) and branches there (or returns
 * null if there is none). */
.macro TAIL_JUMP_TO_LIBC resolver
    stp x29, x30, [sp, #-48]!
    .cfi_def_cfa_offset 48
    .cfi_offset 29, -48
    .cfi_offset 30, -40
    mov x29, sp
    stp x0, x1, [sp, #16]
    str x2, [sp, #32]
    bl \resolver
    mov x16, x0
    ldp x0, x1, [sp, #16]
    ldr x2, [sp, #32]
    ldp x29, x30, [sp], #48
    .cfi_def_cfa_offset 0
    .cfi_restore 29
    .cfi_restore 30
    cbz x16, 9f
    br x16
9:  mov x0, #0
    ret
.endm

    .globl dlsym
    .type dlsym, %function
dlsym:
    .cfi_startproc
    cmn x0, #1                            /* RTLD_NEXT */
    b.eq 1f
    cbz x0, 1f                            /* RTLD_DEFAULT */
    b ferrum_dlsym_on_handle              /* explicit handle: inspect the result */
1:  TAIL_JUMP_TO_LIBC ferrum_libc_dlsym_address
    .cfi_endproc
    .size dlsym, .-dlsym

    .globl dlvsym
    .type dlvsym, %function
dlvsym:
    .cfi_startproc
    cmn x0, #1
    b.eq 1f
    cbz x0, 1f
    b ferrum_dlvsym_on_handle
1:  TAIL_JUMP_TO_LIBC ferrum_libc_dlvsym_address
    .cfi_endproc
    .size dlvsym, .-dlvsym

    .globl dlopen
    .type dlopen, %function
dlopen:
    .cfi_startproc
    TAIL_JUMP_TO_LIBC ferrum_dlopen_prologue  /* notes RTLD_DEEPBIND, returns libc's dlopen */
    .cfi_endproc
    .size dlopen, .-dlopen

    .section .note.GNU-stack,"",%progbits
