//! The attached-functions DAO (application code whose behaviour rollsafe
//! verifies) and the named statement sets each app version runs.

pub mod statements;
