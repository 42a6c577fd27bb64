//! The guest's allocator: a bump arena in the module's own zero-initialised memory, falling back
//! to the system allocator when it is full.
//!
//! Why: Rust's default wasm32 allocator takes every byte of heap through `memory.grow`, so each
//! fresh instance grows its memory on its first allocation, and the host must shrink it again
//! when it recycles the instance's slot. Both are `mprotect` calls, and shrinking a mapping makes
//! the kernel interrupt every core running the gateway to flush its TLB — tens of microseconds
//! per evaluation on the call path. Allocating from memory the module already has avoids both.
//!
//! Every evaluation normally runs on a fresh instance, so memory freed inside the arena is only
//! reclaimed when it was the last allocation (a stack discipline, which covers most temporary
//! buffers); the rest is reclaimed when the instance is dropped. A policy with
//! `reuse_instance` eventually fills the arena and continues on the system allocator.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::UnsafeCell;

/// Arena size: enough for configuring and evaluating typical calls without `memory.grow`.
const ARENA_BYTES: usize = 256 << 10;

#[repr(align(16))]
#[allow(dead_code)] // only ever accessed through raw pointers
struct Bytes([u8; ARENA_BYTES]);

/// A bump allocator over a static buffer, with [`System`] behind it.
pub struct Arena {
    bytes: UnsafeCell<Bytes>,
    /// Offset of the first free byte.
    next: UnsafeCell<usize>,
}

// SAFETY: wasm32 guests are single-threaded (no `atomics` target feature, no threads in the
// component model here), so the cells are never accessed concurrently.
#[allow(unsafe_code)]
unsafe impl Sync for Arena {}

impl Arena {
    pub const fn new() -> Arena {
        Arena {
            bytes: UnsafeCell::new(Bytes([0; ARENA_BYTES])),
            next: UnsafeCell::new(0),
        }
    }

    fn base(&self) -> usize {
        self.bytes.get() as usize
    }

    fn contains(&self, ptr: *mut u8) -> bool {
        let addr = ptr as usize;
        addr >= self.base() && addr < self.base() + ARENA_BYTES
    }
}

impl Default for Arena {
    fn default() -> Self {
        Arena::new()
    }
}

// SAFETY: every pointer handed out is either inside the arena, aligned as requested and not
// overlapping any live allocation (the bump offset only moves back over the most recent
// allocation when that one is freed), or comes from `System` and goes back to it.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Arena {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: single-threaded (see `Sync` above); no other reference to `next` is live.
        let next = unsafe { &mut *self.next.get() };
        let start = (self.base() + *next).next_multiple_of(layout.align());
        let end = start + layout.size();
        if end <= self.base() + ARENA_BYTES {
            *next = end - self.base();
            return start as *mut u8;
        }
        // SAFETY: forwarded with the caller's valid layout.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if !self.contains(ptr) {
            // SAFETY: not from the arena, so from `System` with this layout.
            return unsafe { System.dealloc(ptr, layout) };
        }
        // SAFETY: single-threaded.
        let next = unsafe { &mut *self.next.get() };
        if ptr as usize + layout.size() == self.base() + *next {
            *next = ptr as usize - self.base();
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if self.contains(ptr) {
            // SAFETY: single-threaded.
            let next = unsafe { &mut *self.next.get() };
            let is_last = ptr as usize + layout.size() == self.base() + *next;
            if is_last && ptr as usize + new_size <= self.base() + ARENA_BYTES {
                *next = ptr as usize + new_size - self.base();
                return ptr;
            }
        }
        // SAFETY: the default path: allocate, copy the smaller size, free the old block.
        unsafe {
            let new_layout = Layout::from_size_align_unchecked(new_size, layout.align());
            let new = self.alloc(new_layout);
            if !new.is_null() {
                std::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
                self.dealloc(ptr, layout);
            }
            new
        }
    }
}
