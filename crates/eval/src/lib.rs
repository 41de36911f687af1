//! Measuring the schedulers of `pspat-sched`: tools that drive a
//! [`Scheduler`](pspat_sched::Scheduler) from outside and judge what it did.
//! None of them is needed to schedule, so none of them lives in the core,
//! and no algorithm depends on them.
//!
//! | Module | What |
//! |---|---|
//! | [`fluid`] | the exact fluid (GPS) reference: when each packet would leave an ideal, infinitely divisible link |
//! | [`workload`] | named traffic patterns (greedy, on/off, victim, the PSPAT paper's §5.2 example) generated into arrivals |
//! | [`wfi`] | an ideal one-packet-at-a-time link, per-flow T-WFI, B-WFI and lag, and the bound of each algorithm |
//! | [`harness`] | the dummynet-style fill/drain controller that measures the cost of an enqueue/dequeue pair |
//!
//! Like the core, these tools read no clock, spawn no thread and use no
//! `unsafe`; unlike it they allocate freely (they are not on a packet path).
//! Bad input is a [`ConfigError`](pspat_sched::ConfigError) naming the
//! parameter.
//!
//! # Example
//! ```
//! use pspat_eval::wfi::{self, Scenario, Workload, WorkloadParams};
//! use pspat_sched::AlgKind;
//! let workload = Workload::Greedy { weights: vec![1, 4] };
//! let params = WorkloadParams { duration_ns: 200_000, ..WorkloadParams::default() };
//! let scenario = Scenario::generate(&workload, &params).unwrap();
//! let run = wfi::run(AlgKind::Qfq, &scenario).unwrap();
//! assert!(run.report.all_within_bound);
//! ```
#![forbid(unsafe_code)]

pub mod fluid;
pub mod harness;
pub mod wfi;
pub mod workload;
