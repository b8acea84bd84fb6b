//! Function-pointer tables resolved from a loaded library. A table resolves all of its symbols or
//! none: a missing name is recorded so the caller can report every missing symbol at once.

/// Declares a struct of `unsafe extern "C"` function pointers named after their symbols, with a
/// `resolve` that looks each one up in a `libloading::Library`.
macro_rules! symbol_table {
    ($(#[$meta:meta])* $vis:vis struct $table:ident {
        $( $sym:ident : fn($($arg:ty),* $(,)?) -> $ret:ty; )*
    }) => {
        $(#[$meta])*
        #[allow(non_snake_case)]
        $vis struct $table {
            $( pub $sym: unsafe extern "C" fn($($arg),*) -> $ret, )*
        }

        impl $table {
            /// Resolves every symbol; on failure pushes each missing name to `missing`.
            ///
            /// # Safety
            /// The signatures above must match the library's, and the library must stay loaded
            /// for as long as the table is used.
            #[allow(non_snake_case)]
            pub unsafe fn resolve(lib: &libloading::Library, missing: &mut Vec<&'static str>) -> Option<Self> {
                $(
                    let $sym = unsafe {
                        lib.get::<unsafe extern "C" fn($($arg),*) -> $ret>(concat!(stringify!($sym), "\0").as_bytes())
                    }
                    .map(|s| *s)
                    .map_err(|_| missing.push(stringify!($sym)))
                    .ok();
                )*
                Some(Self { $( $sym: $sym?, )* })
            }
        }
    };
}

pub(crate) use symbol_table;
