//! weir core
