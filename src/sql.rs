//! Placeholder until the squawk-based splitter lands: the whole file as one
//! statement, `exact = false` (callers fall back to file-level work).

/// One top-level statement of a SQL file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Statement {
    pub text: String,
    pub start: usize,
    pub end: usize,
    pub line: usize,
    pub column: usize,
}

impl Statement {
    pub fn excerpt(&self, max_chars: usize) -> String {
        let folded = self.text.split_whitespace().collect::<Vec<_>>().join(" ");
        if folded.chars().count() > max_chars {
            folded.chars().take(max_chars).collect::<String>() + "…"
        } else {
            folded
        }
    }
}

pub struct Split {
    pub statements: Vec<Statement>,
    pub exact: bool,
}

pub fn split(sql: &str) -> Split {
    let trimmed = sql.trim();
    let start = sql.len() - sql.trim_start().len();
    let line = sql[..start].matches('\n').count() + 1;
    Split {
        statements: if trimmed.is_empty() {
            vec![]
        } else {
            vec![Statement {
                text: trimmed.to_string(),
                start,
                end: start + trimmed.len(),
                line,
                column: 1,
            }]
        },
        exact: false,
    }
}
