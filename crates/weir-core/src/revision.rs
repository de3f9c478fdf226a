//! Revision identity.
