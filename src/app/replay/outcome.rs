//! How each replayed app statement fared (prepared, executed, its locks,
//! a privilege it lacked), measured by [`crate::app::replay`]; judged
//! by `compat`, and read by the stages to know what blocks the apps.

/// Why a statement was refused a privilege, as its role sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Denied {
    /// The object the server names (`public.t`), as it names it.
    pub table: String,
    /// The privileges the role lacks there that the statement needs
    /// (`INSERT`, `SELECT`); empty when none could be named.
    pub privileges: Vec<String>,
    /// Row-level security is enabled on the table: a row was refused by
    /// its policies (or, without any, by default deny).
    pub row_security: bool,
    /// The role the statement ran as.
    pub role: String,
}

/// How one statement fared, and what it is: its result columns and
/// parameter types as the server describes them, and the table locks its
/// execution took (its real effect: ROW EXCLUSIVE for a write, ROW SHARE
/// for `FOR UPDATE`, ACCESS SHARE for a read).
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    pub statement: String,
    /// None when it prepared and executed; else the step and the server's
    /// message.
    pub failure: Option<(Step, String)>,
    /// (name, type) of each result column, when it prepared.
    pub columns: Vec<(String, String)>,
    /// Parameter types, when it prepared.
    pub params: Vec<String>,
    /// (table, mode) of the relation locks its execution took.
    pub locks: Vec<(String, String)>,
    /// The SQLSTATE of the failure, when the server gave one.
    pub sqlstate: Option<String>,
    /// What privilege it lacked, when it failed with SQLSTATE 42501.
    pub denied: Option<Denied>,
    /// Rows it returned or changed when it executed.
    pub rows: Option<u64>,
    /// The parameters (1-based `$N`) bound NULL: their `-- param:`
    /// expression found no value (a lookup in a table without rows), or
    /// rollsafe has no value for their type.
    pub null_params: Vec<usize>,
    /// It first failed only on a value rollsafe made for it (a captured
    /// `-- param:` marked as rollsafe's), not on the tests' values nor on
    /// what the migration changed: why (the value and the constraint).
    /// The rest of the outcome is then its run again with a value that
    /// holds; `failure` stays None with `rows` None when none could be
    /// made (the statement is not measured).
    pub made_value: Option<String>,
}

impl Outcome {
    /// Whether executing it took a lock that only writers take.
    pub fn writes(&self) -> bool {
        self.locks.iter().any(|(_, m)| m != "AccessShareLock")
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Prepare,
    Params,
    Execute,
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Step::Prepare => "PREPARE",
            Step::Params => "evaluating its declared parameters",
            Step::Execute => "EXECUTE",
        })
    }
}
