//! Integration tests of pspat-config.
