//! Embeds `migrations/*.sql` into the binary: `rollsafe` with no
//! `--migrations` flag applies and verifies exactly the files it was built
//! with. Validation (names, versions) happens in `catalog` at run time, so a
//! bad file is reported with the same message whether embedded or loaded.

use std::fmt::Write;
use std::path::Path;

fn main() {
    println!("cargo:rerun-if-changed=migrations");
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("migrations/ directory")
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "sql"))
        .collect();
    files.sort();
    let mut out = String::from("&[\n");
    for f in &files {
        println!("cargo:rerun-if-changed={}", f.display());
        let name = f.file_name().unwrap().to_string_lossy();
        writeln!(
            out,
            "    ({name:?}, include_bytes!({:?})),",
            f.display().to_string()
        )
        .unwrap();
    }
    out.push(']');
    let dest = Path::new(&std::env::var("OUT_DIR").unwrap()).join("embedded_migrations.rs");
    std::fs::write(dest, out).unwrap();
}
