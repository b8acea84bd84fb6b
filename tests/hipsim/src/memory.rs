//! The device address model. Device memory lives at fake addresses above the 47-bit
//! user address space (so it can never alias real host memory) and is backed by host
//! buffers; every device-side access is bounds-checked against live allocations, VMM
//! mappings with access rights, and registered host memory.

use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use crate::error::{HipResult, ILLEGAL_ADDRESS, INVALID_VALUE, OUT_OF_MEMORY};
use crate::vmm::Vmm;

/// Device d's hipMalloc range starts at DEV_BASE + d * DEV_SPAN.
pub const DEV_BASE: u64 = 1 << 48;
pub const DEV_SPAN: u64 = 1 << 40;
const DEV_END: u64 = DEV_BASE + 16 * DEV_SPAN;
const ALIGN: u64 = 256;
/// Per-device capacity; larger requests fail like an exhausted GPU would.
pub const CAPACITY: u64 = 64 << 30;

/// A zeroed host buffer at a stable address (calloc-like, so untouched pages cost nothing).
pub struct Buf {
    ptr: *mut u8,
    layout: Layout,
}

// SAFETY: Buf exclusively owns its allocation; access is serialized by the MEM lock
// (or, for host-visible memory, is what the C program itself races on).
unsafe impl Send for Buf {}

impl Buf {
    pub fn zeroed(len: usize, align: usize) -> HipResult<Buf> {
        let layout = Layout::from_size_align(len.max(1), align).map_err(|_| OUT_OF_MEMORY)?;
        // SAFETY: layout has non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(OUT_OF_MEMORY);
        }
        Ok(Buf { ptr, layout })
    }

    pub fn ptr(&self) -> *mut u8 {
        self.ptr
    }

    pub fn len(&self) -> usize {
        self.layout.size()
    }
}

impl Drop for Buf {
    fn drop(&mut self) {
        // SAFETY: allocated in `zeroed` with this layout.
        unsafe { dealloc(self.ptr, self.layout) }
    }
}

struct DevAlloc {
    device: i32,
    buf: Buf,
}

struct HostRegion {
    buf: Buf,
    signal: bool,
}

pub struct Mem {
    dev: BTreeMap<u64, DevAlloc>,
    next: [u64; 16],
    /// Bytes of `dev` per device, kept as allocations come and go so that a malloc's capacity
    /// check does not walk every allocation (benchmarks make hundreds of thousands).
    used: [u64; 16],
    host: BTreeMap<u64, HostRegion>,
    pub vmm: Vmm,
}

static MEM: Mutex<Option<Mem>> = Mutex::new(None);

pub struct MemGuard(MutexGuard<'static, Option<Mem>>);

impl std::ops::Deref for MemGuard {
    type Target = Mem;
    fn deref(&self) -> &Mem {
        self.0.as_ref().expect("initialized in lock()")
    }
}

impl std::ops::DerefMut for MemGuard {
    fn deref_mut(&mut self) -> &mut Mem {
        self.0.as_mut().expect("initialized in lock()")
    }
}

pub fn lock() -> MemGuard {
    let mut g = MEM.lock().unwrap_or_else(|e| e.into_inner());
    g.get_or_insert_with(|| Mem {
        dev: BTreeMap::new(),
        next: std::array::from_fn(|d| DEV_BASE + d as u64 * DEV_SPAN),
        used: [0; 16],
        host: BTreeMap::new(),
        vmm: Vmm::default(),
    });
    MemGuard(g)
}

/// Addresses that belong to the simulated device (hipMalloc or VMM ranges).
pub fn is_fake(addr: u64) -> bool {
    (DEV_BASE..DEV_END).contains(&addr) || crate::vmm::is_vmm(addr)
}

impl Mem {
    pub fn malloc(&mut self, device: i32, size: usize) -> HipResult<u64> {
        let d = device as usize;
        let live = self.allocated(device);
        let size64 = size as u64;
        if size64 > CAPACITY || live + size64 > CAPACITY {
            return Err(OUT_OF_MEMORY);
        }
        let buf = Buf::zeroed(size, ALIGN as usize)?;
        let base = self.next[d];
        // A guard gap after each allocation turns small overruns into illegal addresses.
        self.next[d] = base + size64.div_ceil(ALIGN) * ALIGN + ALIGN;
        self.used[d] += buf.len() as u64;
        self.dev.insert(base, DevAlloc { device, buf });
        Ok(base)
    }

    /// An address range of `device` that no allocation will ever take and no access may use:
    /// what a graph's memory allocation node hands out (hipsim models the node, not the
    /// allocation it makes when it runs).
    pub fn reserve_unbacked(&mut self, device: i32, size: usize) -> u64 {
        let d = device as usize;
        let base = self.next[d];
        self.next[d] = base + (size as u64).div_ceil(ALIGN) * ALIGN + ALIGN;
        base
    }

    /// What kind of memory `addr` lies in, as CUDA's executable memcpy setter tells them apart
    /// (the `memcpy_class` quirk): hipMalloc memory of a device, a VMM mapping, registered host
    /// memory, or none of them.
    pub fn class_of(&self, addr: u64) -> (&'static str, i32) {
        if (DEV_BASE..DEV_END).contains(&addr) {
            return ("device", ((addr - DEV_BASE) / DEV_SPAN) as i32);
        }
        if crate::vmm::is_vmm(addr) {
            return ("mapped", -1);
        }
        if self.is_host_registered(addr) { ("host", -1) } else { ("unknown", -1) }
    }

    pub fn host_alloc(&mut self, size: usize, signal: bool) -> HipResult<u64> {
        let buf = Buf::zeroed(size, 4096)?;
        let base = buf.ptr() as u64;
        self.host.insert(base, HostRegion { buf, signal });
        Ok(base)
    }

    /// hipFree: device allocations and signal memory.
    pub fn free(&mut self, addr: u64) -> HipResult {
        if let Some(a) = self.dev.remove(&addr) {
            self.used[a.device as usize] -= a.buf.len() as u64;
            return Ok(());
        }
        match self.host.get(&addr) {
            Some(r) if r.signal => {
                self.host.remove(&addr);
                Ok(())
            }
            _ => Err(INVALID_VALUE),
        }
    }

    pub fn host_free(&mut self, addr: u64) -> HipResult {
        match self.host.get(&addr) {
            Some(r) if !r.signal => {
                self.host.remove(&addr);
                Ok(())
            }
            _ => Err(INVALID_VALUE),
        }
    }

    pub fn is_host_registered(&self, addr: u64) -> bool {
        self.host_region(addr).is_some()
    }

    fn host_region(&self, addr: u64) -> Option<(u64, usize)> {
        let (&base, r) = self.host.range(..=addr).next_back()?;
        (addr < base + r.buf.len() as u64).then_some((base, r.buf.len()))
    }

    /// Bytes of `device`'s allocations.
    pub fn allocated(&self, device: i32) -> u64 {
        usize::try_from(device).ok().and_then(|d| self.used.get(d)).copied().unwrap_or(0)
    }

    pub fn live_allocs(&self) -> usize {
        self.dev.len() + self.host.values().filter(|r| r.signal).count()
    }

    /// Host pointer backing device address `p` and how many bytes stay contiguous from it.
    fn locate(&self, dev: i32, p: u64, write: bool) -> HipResult<(*mut u8, usize)> {
        if (DEV_BASE..DEV_END).contains(&p) {
            let (&base, a) = self.dev.range(..=p).next_back().ok_or(ILLEGAL_ADDRESS)?;
            let off = (p - base) as usize;
            if off >= a.buf.len() {
                return Err(ILLEGAL_ADDRESS);
            }
            // SAFETY: off is inside the buffer.
            return Ok((unsafe { a.buf.ptr().add(off) }, a.buf.len() - off));
        }
        if crate::vmm::is_vmm(p) {
            return self.vmm.locate(dev, p, write);
        }
        let (base, len) = self.host_region(p).ok_or(ILLEGAL_ADDRESS)?;
        Ok((p as *mut u8, len - (p - base) as usize))
    }

    /// Validates a device-side access before anything is allocated for it.
    pub fn check(&self, dev: i32, addr: u64, len: usize, write: bool) -> HipResult {
        addr.checked_add(len as u64).ok_or(ILLEGAL_ADDRESS)?;
        let mut done = 0;
        while done < len {
            done += self.locate(dev, addr + done as u64, write)?.1.min(len - done);
        }
        Ok(())
    }

    /// Device-side read of `out.len()` bytes at `addr`, possibly spanning adjacent VMM mappings.
    pub fn read(&self, dev: i32, addr: u64, out: &mut [u8]) -> HipResult {
        let mut done = 0;
        while done < out.len() {
            let (src, avail) = self.locate(dev, addr + done as u64, false)?;
            let n = avail.min(out.len() - done);
            // SAFETY: `locate` guarantees `avail` readable bytes at `src`.
            unsafe { read_host(src, &mut out[done..done + n]) };
            done += n;
        }
        Ok(())
    }

    pub fn write(&mut self, dev: i32, addr: u64, data: &[u8]) -> HipResult {
        addr.checked_add(data.len() as u64).ok_or(ILLEGAL_ADDRESS)?;
        let mut done = 0;
        while done < data.len() {
            let (dst, avail) = self.locate(dev, addr + done as u64, true)?;
            let n = avail.min(data.len() - done);
            // SAFETY: as in `read`.
            unsafe { write_host(dst, &data[done..done + n]) };
            done += n;
        }
        Ok(())
    }
}

/// 8-byte aligned words go through acquire/release atomics so that host-visible memory
/// (signals) written by a stream is observed by a concurrently polling host thread.
///
/// # Safety
/// `src` has `out.len()` readable bytes.
unsafe fn read_host(src: *const u8, out: &mut [u8]) {
    if out.len() == 8 && (src as usize).is_multiple_of(8) {
        // SAFETY: aligned, 8 readable bytes.
        let v = unsafe { (*(src as *const AtomicU64)).load(Ordering::Acquire) };
        out.copy_from_slice(&v.to_ne_bytes());
    } else {
        // SAFETY: the caller promises `out.len()` readable bytes at `src`.
        unsafe { std::ptr::copy(src, out.as_mut_ptr(), out.len()) };
    }
}

/// As `read_host`, for writes.
///
/// # Safety
/// `dst` has `data.len()` writable bytes.
unsafe fn write_host(dst: *mut u8, data: &[u8]) {
    if data.len() == 8 && (dst as usize).is_multiple_of(8) {
        let v = u64::from_ne_bytes(data.try_into().expect("8 bytes"));
        // SAFETY: aligned, 8 writable bytes.
        unsafe { (*(dst as *const AtomicU64)).store(v, Ordering::Release) };
    } else {
        // SAFETY: the caller promises `data.len()` writable bytes at `dst`.
        unsafe { std::ptr::copy(data.as_ptr(), dst, data.len()) };
    }
}

/// hipMemcpyKind; hipMemcpyDefault (4) infers each side from the address.
pub fn copy(dev: i32, dst: u64, src: u64, n: usize, kind: i32) -> HipResult {
    if !(0..=4).contains(&kind) {
        return Err(INVALID_VALUE);
    }
    if n == 0 {
        return Ok(());
    }
    if dst == 0 || src == 0 {
        return Err(INVALID_VALUE);
    }
    let src_dev = kind == 2 || kind == 3 || is_fake(src);
    let dst_dev = kind == 1 || kind == 3 || is_fake(dst);
    let mut m = lock();
    if src_dev {
        m.check(dev, src, n, false)?;
    }
    if dst_dev {
        m.check(dev, dst, n, true)?;
    }
    let mut buf = vec![0u8; n];
    if src_dev {
        m.read(dev, src, &mut buf)?;
    } else {
        // SAFETY: host side of a copy: the caller vouches for `n` readable bytes, as with the real runtime.
        unsafe { std::ptr::copy(src as *const u8, buf.as_mut_ptr(), n) };
    }
    if dst_dev {
        m.write(dev, dst, &buf)
    } else {
        // SAFETY: as above, for writing.
        unsafe { std::ptr::copy(buf.as_ptr(), dst as *mut u8, n) };
        Ok(())
    }
}

/// hipStreamWaitValue comparisons (hipStreamWaitValueGte/Eq/And/Nor), on the masked value.
pub fn wait_satisfied(flags: u32, cur: u64, value: u64, mask: u64) -> bool {
    let cur = cur & mask;
    match flags {
        0 => cur >= value,
        1 => cur == value,
        2 => cur & value != 0,
        _ => !(cur | value) != 0,
    }
}

/// Polls the `width`-byte word at `addr` (4 or 8) until it satisfies `flags` against `value`
/// under `mask`, as a stream wait does on the device.
pub fn wait_value(dev: i32, addr: u64, width: usize, value: u64, flags: u32, mask: u64) -> HipResult {
    loop {
        let mut b = [0u8; 8];
        lock().read(dev, addr, &mut b[..width])?;
        if wait_satisfied(flags, u64::from_ne_bytes(b), value, mask) {
            return Ok(());
        }
        std::thread::sleep(std::time::Duration::from_micros(20));
    }
}

/// 2-D memset of `height` rows of `width` elements, `pitch` bytes apart.
pub fn memset(dev: i32, dst: u64, value: u32, elem: u32, width: usize, height: usize, pitch: usize) -> HipResult {
    let pattern: Vec<u8> = match elem {
        1 => vec![value as u8],
        2 => (value as u16).to_ne_bytes().to_vec(),
        4 => value.to_ne_bytes().to_vec(),
        _ => return Err(INVALID_VALUE),
    };
    let row_bytes = width.checked_mul(pattern.len()).ok_or(INVALID_VALUE)?;
    if height > 1 && pitch < row_bytes {
        return Err(INVALID_VALUE);
    }
    let mut m = lock();
    for r in 0..height as u64 {
        m.check(dev, dst + r * pitch as u64, row_bytes, true)?;
    }
    let row: Vec<u8> = pattern.iter().copied().cycle().take(row_bytes).collect();
    for r in 0..height as u64 {
        m.write(dev, dst + r * pitch as u64, &row)?;
    }
    Ok(())
}
