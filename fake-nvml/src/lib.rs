//! # fake-nvml — a simulated `libnvidia-ml.so`
//!
//! Built as `libnvidia_ml_sim.so`, this library exports the NVML C functions hostd uses, with
//! NVML's own struct layouts and return codes, and answers them from a simulated node: N GPUs
//! of known models, with deterministic identities, load-driven utilisation, memory, power and
//! an energy counter integrated over (optionally accelerated) virtual time, plus injectable
//! faults. hostd loads it through nvml-wrapper exactly as it loads the real library, so tests
//! and `hostd dev` exercise the production GPU code path on machines without a GPU.
//!
//! Configuration is read from environment variables at `nvmlInit` (see
//! `docs/gpu-simulation.md`): `NVML_SIM_GPUS`, `NVML_SIM_SEED`, `NVML_SIM_DRIVER`,
//! `NVML_SIM_CLOCK`, `NVML_SIM_CC`, `NVML_SIM_ATTEST_ROOT_OUT` and `NVML_SIM_CONTROL` (a JSON
//! file re-read whenever it changes, for load, fault and CC-mode injection). CC-capable GPUs
//! with CC on sign SPDM attestation reports ([`attestation`]).
//!
//! Layout: [`model`] (GPU products), [`config`] (environment and control file), [`sim`] (the
//! safe, deterministic simulation) and [`ffi`] (the C ABI shell, the only `unsafe` code).

pub mod attestation;
pub mod config;
pub mod ffi;
pub mod model;
pub mod sim;

#[cfg(test)]
mod ffi_tests;
