//! Rebuilds the server when a migration is added: the migrations are embedded at compile time.
fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
