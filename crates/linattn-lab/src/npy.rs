//! .npy I/O (owner: lab helper 1).
