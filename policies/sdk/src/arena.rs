//! The guest's allocator: a bump arena in the module's own zero-initialised memory, falling back
//! to the system allocator when it is full; on a reused instance, small blocks in size classes
//! with a free list each.
//!
//! Why an arena: Rust's default wasm32 allocator takes every byte of heap through `memory.grow`,
//! so each fresh instance grows its memory on its first allocation, and the host must shrink it
//! again when it recycles the instance's slot. Both are `mprotect` calls, and shrinking a
//! mapping makes the kernel interrupt every core running the gateway to flush its TLB — tens of
//! microseconds per evaluation on the call path. Allocating from memory the module already has
//! avoids both. An evaluation normally runs on a fresh instance, so memory freed inside the
//! arena is only reclaimed when it was the last allocation (a stack discipline, which covers
//! most temporary buffers); the rest is reclaimed when the instance is dropped.
//!
//! Why size classes: an instance kept with `reuse_instance` judges call after call, each
//! allocating and freeing much the same small blocks. It soon fills the arena, and the system
//! allocator (`dlmalloc`) it then goes on with spent a third of a Rego evaluation's time in
//! `malloc` and `free`. So after an instance's first evaluation ([`Arena::recycle`]) a small
//! block comes from its size class: a freed block goes onto its class's free list and the next
//! allocation of that class takes it back, both a few instructions on memory still in the cache.
//! Classes carve their blocks from what is left of the arena (so a policy that needs little
//! never grows its memory), then from chunks the system allocator gives (within the instance's
//! memory cap like any allocation), and never give them back, so a reused instance holds at
//! most the small-block memory it once needed at one time. A fresh instance never gets that
//! far: its blocks stay packed as tightly as the bump arena packs them (classes round sizes up,
//! and more memory touched is more page faults and cache misses: measured slower for fresh
//! instances).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::UnsafeCell;

/// Arena size: enough for configuring and evaluating typical calls without `memory.grow`.
const ARENA_BYTES: usize = 256 << 10;
/// Class block sizes are multiples of this (and class blocks are aligned to it).
const GRANULE: usize = 16;
/// The largest block served from a size class; larger ones come from the system allocator.
const SMALL_MAX: usize = 4096;
const CLASSES: usize = SMALL_MAX / GRANULE;
/// The first chunk classes carve from; each later one is twice the one before, up to 4 MiB.
const FIRST_CHUNK: usize = 64 << 10;
const MAX_CHUNK_DOUBLINGS: u32 = 6;

#[repr(align(16))]
#[allow(dead_code)] // only ever accessed through raw pointers
struct Bytes([u8; ARENA_BYTES]);

struct State {
    /// Offset of the arena's first free byte.
    next: usize,
    /// Whether small blocks come from size classes now (see [`Arena::recycle`]).
    recycling: bool,
    /// Where the arena stood when recycling began: small blocks carved above it are class
    /// blocks, those below were packed (0 until then).
    floor: usize,
    /// Each class's most recently freed block (0: none); a free block's first word holds the
    /// address of the next free block of its class.
    free: [usize; CLASSES],
    /// Where the next class block is carved, and where the chunk it is carved from ends.
    carve: usize,
    chunk_end: usize,
    /// How many chunks were taken.
    chunks: u32,
}

/// The guest's global allocator (see the module's documentation).
pub struct Arena {
    bytes: UnsafeCell<Bytes>,
    state: UnsafeCell<State>,
}

// SAFETY: wasm32 guests are single-threaded (no `atomics` target feature, no threads in the
// component model here), so the cells are never accessed concurrently.
#[allow(unsafe_code)]
unsafe impl Sync for Arena {}

impl Arena {
    pub const fn new() -> Arena {
        Arena {
            bytes: UnsafeCell::new(Bytes([0; ARENA_BYTES])),
            state: UnsafeCell::new(State {
                next: 0,
                recycling: false,
                floor: 0,
                free: [0; CLASSES],
                carve: 0,
                chunk_end: 0,
                chunks: 0,
            }),
        }
    }

    /// From now on the instance judges call after call: small blocks come from size classes.
    /// Called after each evaluation; blocks allocated before stay where they are.
    pub fn recycle(&self) {
        let base = self.base();
        let state = self.state();
        if !state.recycling {
            state.recycling = true;
            state.floor = (base + state.next)
                .next_multiple_of(GRANULE)
                .min(base + ARENA_BYTES);
            state.next = state.floor - base;
        }
    }

    #[allow(unsafe_code, clippy::mut_from_ref)]
    #[inline]
    fn state(&self) -> &mut State {
        // SAFETY: single-threaded (see `Sync`), and no caller holds the reference across another
        // call that takes it.
        unsafe { &mut *self.state.get() }
    }

    #[inline]
    fn base(&self) -> usize {
        self.bytes.get() as usize
    }

    #[inline]
    fn in_arena(&self, ptr: *mut u8) -> bool {
        (self.base()..self.base() + ARENA_BYTES).contains(&(ptr as usize))
    }

    /// The size class of `layout` (block size `(class + 1) * GRANULE`), or `None` for a large
    /// or over-aligned block, which the arena or the system allocator serves.
    #[inline]
    fn class(layout: Layout) -> Option<usize> {
        (layout.size() <= SMALL_MAX && layout.align() <= GRANULE)
            .then(|| layout.size().max(1).div_ceil(GRANULE) - 1)
    }

    /// The class of the block at `ptr` allocated with `layout`, if it is a class block (its
    /// class's size and alignment): any small block outside the arena (carved from a chunk, or
    /// `System`'s, allocated rounded), and a small block carved in the arena above the floor.
    #[inline]
    fn block_class(&self, ptr: *mut u8, layout: Layout) -> Option<usize> {
        let class = Arena::class(layout)?;
        let state = self.state();
        (!self.in_arena(ptr) || (state.recycling && ptr as usize >= state.floor)).then_some(class)
    }

    /// How many bytes a block allocated with `layout` spans, given its [`Arena::block_class`].
    fn extent(class: Option<usize>, layout: Layout) -> usize {
        class.map_or(layout.size(), |class| (class + 1) * GRANULE)
    }

    /// Puts a class block no longer in use onto its class's list.
    ///
    /// # Safety
    /// `ptr` is a block of `class` (see [`Arena::block_class`]) that nothing uses any more.
    #[allow(unsafe_code)]
    #[inline]
    unsafe fn push_free(&self, class: usize, ptr: *mut u8) {
        let state = self.state();
        // SAFETY: the caller's promise: at least `GRANULE` bytes aligned to it, ours to reuse;
        // its first word now links it into the list.
        unsafe { *(ptr as *mut usize) = state.free[class] };
        state.free[class] = ptr as usize;
    }

    /// What the system allocator is asked for instead of `layout`: a small block is always
    /// its class's size and alignment, so that once recycling it can join its class's list
    /// wherever it came from.
    fn rounded(layout: Layout) -> Layout {
        match Arena::class(layout) {
            // SAFETY: a multiple of a power-of-two alignment, far from overflowing.
            #[allow(unsafe_code)]
            Some(class) => unsafe {
                Layout::from_size_align_unchecked((class + 1) * GRANULE, GRANULE)
            },
            None => layout,
        }
    }

    /// A block of `class`: a freed one, else one carved from the current chunk or a new one
    /// (null when the system allocator has no room).
    #[allow(unsafe_code)]
    #[inline]
    fn class_block(&self, class: usize) -> *mut u8 {
        let state = self.state();
        let block = state.free[class];
        if block != 0 {
            // SAFETY: a free block of this class holds the next one's address in its first
            // word, aligned for a `usize`.
            state.free[class] = unsafe { *(block as *const usize) };
            return block as *mut u8;
        }
        let size = (class + 1) * GRANULE;
        // The arena first: a policy whose evaluations need little never grows its memory.
        let start = (self.base() + state.next).next_multiple_of(GRANULE);
        if start + size <= self.base() + ARENA_BYTES {
            state.next = start + size - self.base();
            return start as *mut u8;
        }
        if state.chunk_end - state.carve < size {
            // The rest of the chunk (under one block) is left unused.
            let bytes = FIRST_CHUNK << state.chunks.min(MAX_CHUNK_DOUBLINGS);
            // SAFETY: a non-zero size and a valid alignment; chunks are never freed.
            let start = unsafe { System.alloc(Layout::from_size_align_unchecked(bytes, GRANULE)) };
            if start.is_null() {
                return start;
            }
            state.chunks += 1;
            state.carve = start as usize;
            state.chunk_end = start as usize + bytes;
        }
        let block = state.carve;
        state.carve += size;
        block as *mut u8
    }
}

impl Default for Arena {
    fn default() -> Self {
        Arena::new()
    }
}

// SAFETY: a pointer handed out is (1) inside the arena, aligned as requested and overlapping no
// live allocation (the bump offset only moves back over the most recent allocation when that
// one is freed); or (2) for a small layout, a block of its class — `(class + 1) * GRANULE`
// bytes (at least the layout's size), aligned to `GRANULE` (at least the layout's alignment),
// on no free list while handed out — carved from the arena above the floor or from a chunk no
// one else uses, or given by `System` for exactly the class's size and alignment; or (3) for a large layout, `System`'s for that
// layout. `dealloc` and `realloc` tell the arena apart by address, the rest by the layout.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Arena {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if self.state().recycling
            && let Some(class) = Arena::class(layout)
        {
            return self.class_block(class);
        }
        let state = self.state();
        let start = (self.base() + state.next).next_multiple_of(layout.align());
        let end = start + layout.size();
        if end <= self.base() + ARENA_BYTES {
            state.next = end - self.base();
            return start as *mut u8;
        }
        // SAFETY: a valid layout, at least the caller's.
        unsafe { System.alloc(Arena::rounded(layout)) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if let Some(class) = self.block_class(ptr, layout)
            && self.state().recycling
        {
            // The common case on a reused instance: onto its class's list (even the block
            // carved last: its class takes it again).
            // SAFETY: a class block no longer in use.
            return unsafe { self.push_free(class, ptr) };
        }
        let state = self.state();
        if self.in_arena(ptr) {
            // Not a class block. The last block carved goes back to the bump offset; below
            // the floor a block stays where it is (the arena's next blocks are carved above
            // the floor).
            if ptr as usize + layout.size() == self.base() + state.next
                && ptr as usize >= state.floor
            {
                state.next = ptr as usize - self.base();
            }
            return;
        }
        // SAFETY: not a class block of a reused instance, so `System`'s (before recycling no
        // chunk exists), allocated with the rounded layout.
        unsafe { System.dealloc(ptr, Arena::rounded(layout)) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's promise that `new_size`, rounded up to the alignment, does not
        // overflow `isize`.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        let class = self.block_class(ptr, layout);
        if class.is_some() && class == Arena::class(new_layout) {
            // A class block, and the new size is of its class: it already has room.
            return ptr;
        }
        let state = self.state();
        if self.in_arena(ptr) {
            let extent = Arena::extent(class, layout);
            let new_extent = Arena::extent(self.block_class(ptr, new_layout), new_layout);
            let is_last = ptr as usize + extent == self.base() + state.next;
            let above_floor = ptr as usize >= state.floor;
            if is_last && above_floor && ptr as usize + new_extent <= self.base() + ARENA_BYTES {
                state.next = ptr as usize + new_extent - self.base();
                return ptr;
            }
        } else {
            match (Arena::class(layout), Arena::class(new_layout)) {
                // `System`'s block either way (before recycling, no chunk exists), with the
                // layouts it was and will be allocated with.
                (Some(_), Some(_)) if !state.recycling => {}
                (None, None) => {}
                // SAFETY: the caller's promises, passed on.
                _ => return unsafe { self.move_block(ptr, layout, new_layout) },
            }
            let new_size = Arena::rounded(new_layout).size();
            // SAFETY: `System`'s block with its allocation layout; the new size keeps it.
            return unsafe { System.realloc(ptr, Arena::rounded(layout), new_size) };
        }
        // SAFETY: the caller's promises, passed on.
        unsafe { self.move_block(ptr, layout, new_layout) }
    }
}

impl Arena {
    /// Allocates `new_layout`, copies the smaller size over and frees the old block.
    ///
    /// # Safety
    /// As [`GlobalAlloc::realloc`].
    #[allow(unsafe_code)]
    unsafe fn move_block(&self, ptr: *mut u8, layout: Layout, new_layout: Layout) -> *mut u8 {
        // SAFETY: the caller's promises.
        unsafe {
            let new = self.alloc(new_layout);
            if !new.is_null() {
                std::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_layout.size()));
                self.dealloc(ptr, layout);
            }
            new
        }
    }
}

#[cfg(test)]
#[allow(unsafe_code)]
mod tests {
    use super::*;

    /// Allocates through `arena` and fills the block with `tag`.
    fn take(arena: &Arena, size: usize, align: usize, tag: u8) -> (*mut u8, Layout) {
        let layout = Layout::from_size_align(size, align).unwrap();
        // SAFETY: a non-zero size.
        let ptr = unsafe { arena.alloc(layout) };
        assert!(!ptr.is_null());
        assert_eq!(ptr as usize % align, 0, "{size} bytes aligned to {align}");
        // SAFETY: `size` bytes were just allocated.
        unsafe { ptr.write_bytes(tag, size) };
        (ptr, layout)
    }

    fn holds(ptr: *mut u8, size: usize, tag: u8) -> bool {
        // SAFETY: a live block of at least `size` bytes.
        unsafe { std::slice::from_raw_parts(ptr, size) }
            .iter()
            .all(|&b| b == tag)
    }

    fn free(arena: &Arena, (ptr, layout): (*mut u8, Layout)) {
        // SAFETY: the tests pass only live blocks with their layouts.
        unsafe { arena.dealloc(ptr, layout) };
    }

    #[test]
    fn a_fresh_instance_packs_blocks_and_takes_back_the_last_one() {
        let arena = Box::new(Arena::new());
        let a = take(&arena, 5, 1, 1);
        let b = take(&arena, 3, 1, 2);
        assert_eq!(
            b.0 as usize,
            a.0 as usize + 5,
            "packed, not rounded to a class"
        );
        free(&arena, b);
        let c = take(&arena, 200, 1, 3);
        assert_eq!(c.0, b.0, "the last block's space is carved again");
        // SAFETY: live with its layout; a non-zero size.
        let grown = unsafe { arena.realloc(c.0, c.1, 3000) };
        assert_eq!(grown, c.0, "the last block grows in place");
        assert!(holds(grown, 200, 3) && holds(a.0, 5, 1));
    }

    #[test]
    fn once_recycling_a_freed_block_is_taken_again_by_its_class_and_only_by_it() {
        let arena = Box::new(Arena::new());
        let configured = take(&arena, 24, 8, 9);
        arena.recycle();
        let a = take(&arena, 24, 8, 1);
        assert!(
            arena.in_arena(a.0),
            "a class block, from the arena while it has room"
        );
        assert_eq!(a.0 as usize % GRANULE, 0);
        let b = take(&arena, 8, 8, 4);
        free(&arena, a);
        let other = take(&arena, 100, 8, 2);
        assert_ne!(other.0, a.0, "another class carves a block of its own");
        let again = take(&arena, 32, 16, 3);
        assert_eq!(
            again.0, a.0,
            "the same class (17–32 bytes) takes the freed block"
        );
        assert!(holds(other.0, 100, 2) && holds(b.0, 8, 4) && holds(configured.0, 24, 9));
        free(&arena, configured);
        let _filler = take(&arena, ARENA_BYTES - arena.state().next, 1, 0);
        let from_chunk = take(&arena, 24, 8, 5);
        assert!(!arena.in_arena(from_chunk.0), "then from a chunk");
        assert_eq!(arena.state().chunks, 1);
    }

    #[test]
    fn past_the_arena_small_blocks_go_back_to_the_system_allocator_until_recycling() {
        let arena = Box::new(Arena::new());
        let _filler = take(&arena, ARENA_BYTES - 8, 1, 0);
        let outside = take(&arena, 48, 8, 2);
        assert!(!arena.in_arena(outside.0));
        free(&arena, outside);
        assert_eq!(
            arena.state().free[2],
            0,
            "not kept by its class (33–48 bytes)"
        );
        let before = take(&arena, 40, 8, 3);
        arena.recycle();
        free(&arena, before);
        assert_eq!(arena.state().free[2], before.0 as usize, "recycling: kept");
        assert_eq!(take(&arena, 33, 1, 4).0, before.0);
        assert_eq!(arena.state().chunks, 0, "no chunk was needed");
    }

    #[test]
    fn large_or_overaligned_blocks_come_from_the_system_allocator_once_the_arena_is_full() {
        let arena = Box::new(Arena::new());
        let _filler = take(&arena, ARENA_BYTES - 8, 1, 0);
        arena.recycle();
        for (size, align) in [(SMALL_MAX + 1, 8), (64, 64), (1 << 20, 16)] {
            let block = take(&arena, size, align, 7);
            assert!(!arena.in_arena(block.0));
            free(&arena, block);
            assert_eq!(arena.state().chunks, 0, "no class was asked");
        }
    }

    #[test]
    fn realloc_keeps_the_contents_between_arena_classes_and_the_system_allocator() {
        for recycle_at in [0, 3, 99] {
            let arena = Box::new(Arena::new());
            let _filler = take(&arena, ARENA_BYTES - 64, 1, 0);
            let (mut ptr, mut layout) = take(&arena, 5, 1, 9);
            let mut filled = 5;
            let sizes = [
                7, 16, 17, 300, 4096, 4097, 100_000, 4000, 12, 3, 60, 5000, 40,
            ];
            for (i, new_size) in sizes.into_iter().enumerate() {
                if i == recycle_at {
                    arena.recycle();
                }
                // SAFETY: `ptr` is live with `layout`; the new size is non-zero.
                ptr = unsafe { arena.realloc(ptr, layout, new_size) };
                assert!(!ptr.is_null());
                assert!(holds(ptr, filled.min(new_size), 9), "grown to {new_size}");
                layout = Layout::from_size_align(new_size, 1).unwrap();
                // SAFETY: `new_size` bytes are ours.
                unsafe { ptr.write_bytes(9, new_size) };
                filled = new_size;
            }
            free(&arena, (ptr, layout));
        }
    }

    /// Many blocks of mixed sizes, freed and taken again in a scrambled order, well past the
    /// arena, with recycling switched on halfway: no two live blocks overlap and none is
    /// overwritten by another's use.
    #[test]
    fn live_blocks_never_overlap_under_churn() {
        for recycle_at in [0, 300, 20_000] {
            churn(recycle_at);
        }
    }

    fn churn(recycle_at: u32) {
        let arena = Box::new(Arena::new());
        let mut live: Vec<(*mut u8, Layout, u8)> = Vec::new();
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut random = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut carved = 0usize;
        for round in 0..60_000u32 {
            if round == recycle_at {
                arena.recycle();
            }
            let r = random();
            if r % 3 == 0 && !live.is_empty() {
                let (ptr, layout, tag) = live.swap_remove((r as usize / 3) % live.len());
                assert!(holds(ptr, layout.size(), tag), "round {round}: overwritten");
                free(&arena, (ptr, layout));
            } else if r % 7 == 1 && !live.is_empty() {
                let i = (r as usize / 7) % live.len();
                let (ptr, layout, tag) = live[i];
                let new_size = 1 + (r >> 20) as usize % 6000;
                // SAFETY: live with `layout`; a non-zero size.
                let new = unsafe { arena.realloc(ptr, layout, new_size) };
                assert!(
                    holds(new, layout.size().min(new_size), tag),
                    "round {round}"
                );
                let layout = Layout::from_size_align(new_size, layout.align()).unwrap();
                // SAFETY: `new_size` bytes are ours.
                unsafe { new.write_bytes(tag, new_size) };
                live[i] = (new, layout, tag);
            } else {
                let size = match r % 10 {
                    0 => 1 + (r >> 8) as usize % 20_000,
                    _ => 1 + (r >> 8) as usize % 600,
                };
                let align = 1 << ((r >> 40) % 5);
                let tag = (round % 251) as u8;
                let (ptr, layout) = take(&arena, size, align, tag);
                carved += size;
                live.push((ptr, layout, tag));
            }
        }
        assert!(carved > 4 * ARENA_BYTES, "the churn went past the arena");
        assert!(arena.state().chunks > 0, "and into the classes' chunks");
        let mut spans: Vec<(usize, usize)> = live
            .iter()
            .map(|(p, l, _)| (*p as usize, *p as usize + l.size()))
            .collect();
        spans.sort_unstable();
        assert!(
            spans.windows(2).all(|w| w[0].1 <= w[1].0),
            "live blocks overlap"
        );
        for (ptr, layout, tag) in live {
            assert!(holds(ptr, layout.size(), tag));
            free(&arena, (ptr, layout));
        }
    }
}
