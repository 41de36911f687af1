pub mod run_bed;
pub mod traffic;
