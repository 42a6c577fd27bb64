//! slurm executor (in progress).
