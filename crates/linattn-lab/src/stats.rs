//! Statistics (owner: lab helper 2).
