// Gives the preload library its SONAME (cargo has no setting for it). Its exports, the
// interposers, keep no version of their own: a program linked against ROCm's libamdhip64 or
// glibc references them with that library's version (hipStreamCreate@hip_4.2,
// dlsym@GLIBC_2.34), and the dynamic loader binds such a reference only to a definition of that
// version or to an unversioned one, so a version node of this library would stop the
// interposition (ci/check-library.sh checks they have none).
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,librocm_cmdbuf_preload.so.0");
    println!("cargo:rerun-if-changed=build.rs");
}
