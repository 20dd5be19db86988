//! Target-side increment (TSI) written in Rust: the ifunc `rtsi`.
//!
//! The same ABI as examples/tsi/tsi.c (docs/ifunc-abi.md), as three
//! `extern "C"` functions with unmangled names. Each message adds the
//! payload's one byte to the 8-byte counter at `target_args`, so a test can
//! see the payload mattered (tsi.c adds one and ignores its payload).
//!
//! `#![no_std]`: the shipped code must reach nothing the target cannot bind,
//! so no Rust runtime, no unwinding (`-C panic=abort`) and no allocator.
//! Build: rustc --edition=2021 --crate-type=lib --emit=llvm-bc -O
//!        -C panic=abort -C codegen-units=1 -C debuginfo=0 tsi.rs -o rtsi.bc
#![no_std]

use core::ffi::c_void;

/// Target: runs once per message with the target's registered region.
#[no_mangle]
pub unsafe extern "C" fn rtsi_main(payload: *mut c_void, payload_size: usize,
                                   target_args: *mut c_void) {
    let add = if payload_size >= 1 { *(payload as *const u8) } else { 1 };
    let counter = target_args as *mut u64;
    // The region is tc-serve's memory, 16-byte aligned; unaligned access
    // costs nothing on x86_64 and keeps this correct for any region.
    counter.write_unaligned(counter.read_unaligned().wrapping_add(add as u64));
}

/// Source: the payload is always one byte.
#[no_mangle]
pub extern "C" fn rtsi_payload_bound(_source_args: *mut c_void,
                                     _source_args_size: usize) -> usize {
    1
}

/// Source: the payload is the first byte of the source args, or 1 without.
#[no_mangle]
pub unsafe extern "C" fn rtsi_payload_init(source_args: *mut c_void,
                                           source_args_size: usize,
                                           payload: *mut c_void,
                                           payload_size: *mut usize) -> i32 {
    let byte = if !source_args.is_null() && source_args_size >= 1 {
        *(source_args as *const u8)
    } else {
        1
    };
    *(payload as *mut u8) = byte;
    *payload_size = 1;
    0
}

/// Nothing above can panic, but a no_std library must name a handler.
/// With -C panic=abort nothing unwinds; looping keeps the handler free of
/// any intrinsic or symbol the target would have to provide.
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}
