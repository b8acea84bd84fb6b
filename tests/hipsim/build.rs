fn main() {
    // The project's loader opens libamdhip64.so.6 by SONAME, like the real ROCm 6 runtime.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libamdhip64.so.6");
    // Stream worker threads live until exit; unloading the code under them would crash.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,nodelete");
}
