//! Links with esp-hal's linkall.x (the ESP32-C3's memory map and runtime) and defmt.x.
fn main() {
    for script in ["-Tlinkall.x", "-Tdefmt.x"] {
        println!("cargo:rustc-link-arg-bins={script}");
    }
}
