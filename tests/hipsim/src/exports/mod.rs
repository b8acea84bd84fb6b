//! The exported C API, grouped like the HIP reference manual.

mod attributes;
mod capture;
mod device;
mod exec;
mod graph;
mod knobs;
mod memory;
mod module;
mod stream;
mod user_object;
mod vmm;
