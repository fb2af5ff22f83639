//! Measuring the confidence label and the duplicate rule for whatever model embeds:
//! the calibration set the project wrote and ships (`set`, calibration/README.md).

pub mod set;
