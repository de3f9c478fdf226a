//! The state machine.
