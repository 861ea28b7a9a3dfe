//! The unified kernel image: systemd's EFI stub (`linuxx64.efi.stub` from `systemd-boot-efi`)
//! with the kernel, os-release, command line and initrd added as PE sections, as `ukify` and
//! `objcopy --add-section` do, but byte-for-byte reproducible: the PE timestamp is the build's
//! `SOURCE_DATE_EPOCH` (objcopy 2.40 stamps the current time) and the checksum is recomputed.
//!
//! Each section's `VirtualSize` is its exact content length: that is what systemd-stub reads
//! and measures into PCR 11 ([`crate::measure`]); the file data is zero-padded to the stub's
//! file alignment.

use crate::measure::Section;
use object::pe;
use object::read::pe::{ImageNtHeaders, ImageOptionalHeader};
use object::LittleEndian as LE;

/// Why a UKI could not be assembled from this stub.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum UkiError {
    /// The stub is not a PE32+ EFI application.
    #[error("the EFI stub is not a PE32+ image")]
    NotPe(#[source] object::Error),
    /// The stub's headers have no room for more section headers.
    #[error("the EFI stub's headers have room for {room} more sections, {needed} needed")]
    NoHeaderRoom {
        /// Section headers that fit.
        room: usize,
        /// Section headers needed.
        needed: usize,
    },
    /// The stub is signed or has data past its sections other than a symbol table.
    #[error(
        "the EFI stub carries a certificate table or unknown trailing data; use an unsigned stub"
    )]
    Signed,
    /// A section exceeds what PE can address.
    #[error("section {0} is too large for a PE image")]
    TooLarge(&'static str),
    /// Two sections of one name: systemd-stub would use the last and measure only it, so
    /// the first would be dead weight whose presence the prediction could not show.
    #[error("section {0} is given twice")]
    DuplicateSection(&'static str),
    /// An empty section: systemd-stub and systemd-measure skip it, so it would be in the
    /// image without being measured.
    #[error("section {0} is empty")]
    EmptySection(&'static str),
    /// The PE's headers name ranges outside the file (never for a UKI this module made).
    #[error("the UKI's headers name ranges outside it; no Authenticode digest")]
    AuthenticodeRanges,
}

/// The Authenticode SHA-256 of a PE image (`authenticode` crate): what UEFI firmware measures
/// into PCR 4, as an `EV_EFI_BOOT_SERVICES_APPLICATION` event, when it starts the image. A
/// verifier that replays the firmware's event log compares the applications it finds there
/// with this.
pub fn authenticode_sha256(pe: &[u8]) -> Result<[u8; 32], UkiError> {
    use sha2::Digest;
    let file = object::read::pe::PeFile64::parse(pe).map_err(UkiError::NotPe)?;
    let mut hash = sha2::Sha256::new();
    authenticode::authenticode_digest(&file, &mut hash)
        .map_err(|_| UkiError::AuthenticodeRanges)?;
    Ok(hash.finalize().into())
}

/// Each section once, none empty: so that what the stub measures is every added section.
fn check_sections(sections: &[(Section, &[u8])]) -> Result<(), UkiError> {
    for (i, (section, data)) in sections.iter().enumerate() {
        if data.is_empty() {
            return Err(UkiError::EmptySection(section.name()));
        }
        if sections[..i].iter().any(|(s, _)| s == section) {
            return Err(UkiError::DuplicateSection(section.name()));
        }
    }
    Ok(())
}

/// Characteristics of the added sections: initialized, read-only data.
const DATA_SECTION: u32 = pe::IMAGE_SCN_CNT_INITIALIZED_DATA | pe::IMAGE_SCN_MEM_READ;

/// Offsets of the header fields the assembly rewrites.
struct Layout {
    file_header: usize,
    optional_header: usize,
    section_table: usize,
    sections: usize,
    size_of_headers: usize,
    section_alignment: u32,
    file_alignment: u32,
    end_of_sections: usize,
    end_of_image: u32,
    first_raw: usize,
}

fn align(v: u64, a: u64) -> u64 {
    v.div_ceil(a) * a
}

fn layout(stub: &[u8]) -> Result<Layout, UkiError> {
    let bad = UkiError::NotPe;
    let dos = pe::ImageDosHeader::parse(stub).map_err(bad)?;
    let mut offset = u64::from(dos.nt_headers_offset());
    let nt_start = offset as usize;
    let (nt, data_dirs) = pe::ImageNtHeaders64::parse(stub, &mut offset).map_err(bad)?;
    let opt = nt.optional_header();
    if let Some(cert) = data_dirs.get(pe::IMAGE_DIRECTORY_ENTRY_SECURITY) {
        if cert.size.get(LE) != 0 {
            return Err(UkiError::Signed);
        }
    }
    let sections = nt.sections(stub, offset).map_err(bad)?;
    let mut end_of_sections = 0usize;
    let mut end_of_image = 0u32;
    let mut first_raw = usize::MAX;
    for s in sections.iter() {
        let raw = s.pointer_to_raw_data.get(LE) as usize;
        let raw_end = raw + s.size_of_raw_data.get(LE) as usize;
        end_of_sections = end_of_sections.max(raw_end);
        if s.size_of_raw_data.get(LE) != 0 {
            first_raw = first_raw.min(raw);
        }
        let v_end = s.virtual_address.get(LE) + s.virtual_size.get(LE);
        end_of_image = end_of_image.max(v_end);
    }
    let file_header = nt_start + 4;
    // Past the sections a stub may carry only a COFF symbol table (binutils leaves one): it is
    // never loaded, and the UKI drops it rather than keep an offset the new sections overrun.
    let symbols = nt.file_header().pointer_to_symbol_table.get(LE) as usize;
    let trailing_is_symbols = symbols == end_of_sections;
    if end_of_sections != stub.len() && !trailing_is_symbols {
        return Err(UkiError::Signed);
    }
    Ok(Layout {
        file_header,
        optional_header: file_header + 20,
        section_table: offset as usize,
        sections: sections.len(),
        size_of_headers: opt.size_of_headers() as usize,
        section_alignment: opt.section_alignment(),
        file_alignment: opt.file_alignment(),
        end_of_sections,
        end_of_image,
        first_raw,
    })
}

fn put_u16(buf: &mut [u8], at: usize, v: u16) {
    buf[at..at + 2].copy_from_slice(&v.to_le_bytes());
}

fn put_u32(buf: &mut [u8], at: usize, v: u32) {
    buf[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

fn get_u32(buf: &[u8], at: usize) -> u32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&buf[at..at + 4]);
    u32::from_le_bytes(b)
}

/// Assembles a UKI: `stub` with `sections` appended in the given order, stamped `timestamp`.
pub fn assemble(
    stub: &[u8],
    sections: &[(Section, &[u8])],
    timestamp: u32,
) -> Result<Vec<u8>, UkiError> {
    let l = layout(stub)?;
    check_sections(sections)?;
    let header_end = l.section_table + 40 * l.sections;
    let limit = l.size_of_headers.min(l.first_raw);
    let room = limit.saturating_sub(header_end) / 40;
    if room < sections.len() {
        return Err(UkiError::NoHeaderRoom {
            room,
            needed: sections.len(),
        });
    }
    let (sa, fa) = (
        u64::from(l.section_alignment.max(1)),
        u64::from(l.file_alignment.max(1)),
    );
    let mut out = stub[..l.end_of_sections].to_vec();
    put_u32(&mut out, l.file_header + 8, 0);
    put_u32(&mut out, l.file_header + 12, 0);
    out.resize(align(l.end_of_sections as u64, fa) as usize, 0);
    let mut vaddr = align(u64::from(l.end_of_image), sa);
    let mut added_data = 0u64;
    for (i, (section, data)) in sections.iter().enumerate() {
        let too_large = || UkiError::TooLarge(section.name());
        let raw_at = out.len();
        let raw_size = align(data.len() as u64, fa);
        out.extend_from_slice(data);
        out.resize(raw_at + raw_size as usize, 0);
        let header = section_header(
            section.name(),
            u32::try_from(data.len()).map_err(|_| too_large())?,
            u32::try_from(vaddr).map_err(|_| too_large())?,
            u32::try_from(raw_size).map_err(|_| too_large())?,
            u32::try_from(raw_at).map_err(|_| too_large())?,
        );
        let at = header_end + 40 * i;
        out[at..at + 40].copy_from_slice(&header);
        vaddr = align(vaddr + data.len() as u64, sa);
        added_data += raw_size;
        if u32::try_from(vaddr).is_err() {
            return Err(too_large());
        }
    }
    let count = u16::try_from(l.sections + sections.len())
        .map_err(|_| UkiError::TooLarge("section table"))?;
    put_u16(&mut out, l.file_header + 2, count);
    put_u32(&mut out, l.file_header + 4, timestamp);
    let init_data = u64::from(get_u32(&out, l.optional_header + 8)) + added_data;
    put_u32(
        &mut out,
        l.optional_header + 8,
        u32::try_from(init_data).map_err(|_| UkiError::TooLarge("image"))?,
    );
    put_u32(&mut out, l.optional_header + 56, vaddr as u32);
    let checksum_at = l.optional_header + 64;
    let sum = pe_checksum(&out, checksum_at);
    put_u32(&mut out, checksum_at, sum);
    Ok(out)
}

fn section_header(name: &str, vsize: u32, vaddr: u32, raw_size: u32, raw_at: u32) -> [u8; 40] {
    let mut h = [0u8; 40];
    h[..name.len().min(8)].copy_from_slice(&name.as_bytes()[..name.len().min(8)]);
    put_u32(&mut h, 8, vsize);
    put_u32(&mut h, 12, vaddr);
    put_u32(&mut h, 16, raw_size);
    put_u32(&mut h, 20, raw_at);
    put_u32(&mut h, 36, DATA_SECTION);
    h
}

/// The PE checksum (as `imagehlp!CheckSumMappedFile`): the 16-bit one's-complement-style sum
/// of the file's little-endian words, with the checksum field itself read as zero, folded to
/// 16 bits, plus the file length.
pub fn pe_checksum(file: &[u8], checksum_at: usize) -> u32 {
    let mut sum: u64 = 0;
    for (i, chunk) in file.chunks(2).enumerate() {
        let at = i * 2;
        if at >= checksum_at && at < checksum_at + 4 {
            continue;
        }
        let word = u64::from(chunk[0]) | chunk.get(1).map_or(0, |b| u64::from(*b) << 8);
        sum += word;
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum = (sum & 0xffff) + (sum >> 16);
    (sum as u32).wrapping_add(file.len() as u32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use object::{Object, ObjectSection};

    const STUB: &str = "/usr/lib/systemd/boot/efi/linuxx64.efi.stub";

    fn stub() -> Option<Vec<u8>> {
        std::fs::read(STUB).ok()
    }

    #[test]
    fn sections_are_added_readable_and_the_checksum_holds() {
        let Some(stub) = stub() else {
            eprintln!("skipped: {STUB} missing (package systemd-boot-efi)");
            return;
        };
        let osrel = b"ID=test\n".to_vec();
        let kernel = vec![0xAB; 5000];
        let uki = assemble(
            &stub,
            &[
                (Section::Osrel, &osrel),
                (Section::Cmdline, b"quiet"),
                (Section::Linux, &kernel),
            ],
            1_700_000_000,
        )
        .unwrap();
        let file = object::File::parse(&*uki).unwrap();
        let find = |n: &str| file.section_by_name(n).unwrap();
        assert_eq!(find(".osrel").data().unwrap(), osrel.as_slice());
        assert_eq!(find(".cmdline").data().unwrap(), b"quiet");
        assert_eq!(find(".linux").data().unwrap(), kernel.as_slice());
        assert!(
            file.section_by_name(".sdmagic").is_some(),
            "stub sections kept"
        );
        let l = layout(&uki).unwrap();
        assert_eq!(get_u32(&uki, l.file_header + 4), 1_700_000_000);
        let at = l.optional_header + 64;
        assert_eq!(get_u32(&uki, at), pe_checksum(&uki, at));
        // The stub's own checksum follows the same algorithm.
        let sl = layout(&stub).unwrap();
        assert_eq!(
            get_u32(&stub, sl.optional_header + 64),
            pe_checksum(&stub, sl.optional_header + 64)
        );
        // Same inputs, same bytes.
        let again = assemble(
            &stub,
            &[
                (Section::Osrel, &osrel),
                (Section::Cmdline, b"quiet"),
                (Section::Linux, &kernel),
            ],
            1_700_000_000,
        )
        .unwrap();
        assert_eq!(uki, again);
    }

    #[test]
    fn refuses_what_is_not_a_stub() {
        assert!(matches!(
            assemble(b"MZ not really", &[], 0),
            Err(UkiError::NotPe(_))
        ));
        let Some(mut stub) = stub() else { return };
        // Trailing bytes that are not the symbol table the header points at.
        let l = layout(&stub).unwrap();
        put_u32(&mut stub, l.file_header + 8, 0);
        assert_eq!(assemble(&stub, &[], 0), Err(UkiError::Signed));
    }

    /// The digest covers the sections but not the PE checksum (Authenticode skips it, so a
    /// firmware's measurement does not depend on it).
    #[test]
    fn the_authenticode_digest_covers_the_sections_not_the_checksum() {
        let Some(stub) = stub() else {
            eprintln!("skipped: {STUB} missing (package systemd-boot-efi)");
            return;
        };
        let make = |cmdline: &[u8]| {
            assemble(&stub, &[(Section::Cmdline, cmdline)], 1_700_000_000).unwrap()
        };
        let uki = make(b"quiet");
        let digest = authenticode_sha256(&uki).unwrap();
        assert_ne!(digest, authenticode_sha256(&make(b"quieT")).unwrap());
        let mut other_checksum = uki.clone();
        let at = layout(&uki).unwrap().optional_header + 64;
        put_u32(&mut other_checksum, at, 0x1234_5678);
        assert_eq!(authenticode_sha256(&other_checksum).unwrap(), digest);
        assert!(matches!(
            authenticode_sha256(b"MZ no"),
            Err(UkiError::NotPe(_))
        ));
    }

    #[test]
    fn refuses_a_section_twice_or_an_empty_one() {
        let Some(stub) = stub() else {
            eprintln!("skipped: {STUB} missing (package systemd-boot-efi)");
            return;
        };
        let twice = [(Section::Cmdline, &b"a"[..]), (Section::Cmdline, &b"b"[..])];
        assert_eq!(
            assemble(&stub, &twice, 0),
            Err(UkiError::DuplicateSection(".cmdline"))
        );
        let empty = [
            (Section::Osrel, &b"ID=x\n"[..]),
            (Section::Initrd, &b""[..]),
        ];
        assert_eq!(
            assemble(&stub, &empty, 0),
            Err(UkiError::EmptySection(".initrd"))
        );
    }
}
