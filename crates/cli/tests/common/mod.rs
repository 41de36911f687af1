pub mod run_bed;
