//! Money and units: integer paise, and how amounts, GPU time and energy are shown.

/// Amount in paise for `gpu_ms` at `rate_paise_per_hour`, rounded half up; exact integer math
/// so that the same inputs bill the same on every machine.
pub fn amount_paise(gpu_ms: u64, rate_paise_per_hour: u64) -> u64 {
    let num = u128::from(gpu_ms) * u128::from(rate_paise_per_hour);
    let amount = (num + 1_800_000) / 3_600_000;
    u64::try_from(amount).unwrap_or(u64::MAX)
}

/// `₹10,000.00`, with Indian digit grouping (`₹1,00,000.00`), for any amount (a record's
/// `u64` or a total's `u128`).
pub fn format_inr(paise: impl Into<u128>) -> String {
    let paise: u128 = paise.into();
    let rupees = (paise / 100).to_string();
    let digits = rupees.as_bytes();
    let mut grouped = String::with_capacity(digits.len() + digits.len() / 2 + 1);
    let n = digits.len();
    for (i, &d) in digits.iter().enumerate() {
        let left = n - i;
        grouped.push(char::from(d));
        // A comma before the last three digits, then every two (lakh, crore, ...).
        if left > 3 && (left - 3) % 2 == 1 {
            grouped.push(',');
        }
    }
    format!("₹{grouped}.{:02}", paise % 100)
}

/// GPU-hours with three decimals, from exact milliseconds (rounded half up).
pub fn format_gpu_hours(gpu_ms: u128) -> String {
    let thousandths = (gpu_ms * 1000 + 1_800_000) / 3_600_000;
    format!("{}.{:03}", thousandths / 1000, thousandths % 1000)
}

/// Kilowatt-hours with three decimals.
pub fn format_kwh(joules: f64) -> String {
    format!("{:.3}", joules / 3.6e6)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forty_hours_of_h100_at_250_rupees() {
        assert_eq!(amount_paise(40 * 3_600_000, 25_000), 1_000_000);
    }

    #[test]
    fn rounds_half_up() {
        // 1 ms at 1800 paise/h = 0.5 paise.
        assert_eq!(amount_paise(1, 1_800_000), 1);
        assert_eq!(amount_paise(1, 1_799_999), 0);
    }

    #[test]
    fn money_and_units() {
        assert_eq!(format_inr(0u64), "₹0.00");
        assert_eq!(format_inr(5u64), "₹0.05");
        assert_eq!(format_inr(99_999u64), "₹999.99");
        assert_eq!(format_inr(100_000u64), "₹1,000.00");
        assert_eq!(format_inr(1_000_000u64), "₹10,000.00");
        assert_eq!(format_inr(10_000_000u128), "₹1,00,000.00");
        assert_eq!(format_inr(1_234_567_890u128), "₹1,23,45,678.90");
        assert_eq!(
            format_inr(u128::from(u64::MAX) * 3),
            "₹5,53,40,23,22,21,12,86,548.45"
        );
        assert_eq!(format_gpu_hours(40 * 3_600_000), "40.000");
        assert_eq!(format_gpu_hours(1_800), "0.001"); // 0.0005 h rounds up
        assert_eq!(format_gpu_hours(1_799), "0.000");
        assert_eq!(format_kwh(3.6e6 * 2.5), "2.500");
    }
}
