//! Test machinery for the file store: a fault-injecting file system that fails any one
//! system call ([`fault_injection`]), and a crash model that replays every prefix of a
//! store's writes as a power loss could leave it ([`crash_model`]).

mod crash_model;
mod fault_injection;
