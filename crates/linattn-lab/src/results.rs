//! Results JSON (owner: lab helper 2).
