//! files executor (in progress).
