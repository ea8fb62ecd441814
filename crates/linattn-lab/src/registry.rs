//! Backend registry (owner: lab helper 1).
