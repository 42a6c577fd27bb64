//! sandbox executor (in progress).
