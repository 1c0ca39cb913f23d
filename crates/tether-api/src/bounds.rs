//! The bounds the document gives fields, taken from the constants the
//! validators check (`tether_core::validate`, the cron parser, the
//! server's defaults) so that the two cannot drift apart.
//!
//! utoipa's `minimum`, `maximum`, `max_length` and `max_items` attributes
//! take only literals, so:
//! - a body's fields are bounded by the `field_bounds()` list of their topic,
//!   applied to the generated document by schema and field ([`field!`]
//!   does not compile for a field that does not exist, and [`apply`]
//!   panics, in the document's tests, for one the document lacks);
//! - a query parameter's schema is a type made with [`count`], inlined
//!   with `#[param(inline, value_type = ...)]`, which gives the same
//!   schema as the attributes did.

use std::borrow::Cow;
use std::ops::RangeInclusive;

use utoipa::openapi::schema::{KnownFormat, Object, ObjectBuilder, Schema, SchemaFormat, Type};
use utoipa::openapi::{OpenApi, RefOr};
use utoipa::Number;

/// What a field may hold.
pub(crate) enum Bound {
    /// `minimum` and `maximum` of a number.
    Range(Number, Number),
    /// `minLength` and `maxLength` of a string.
    Length(usize, usize),
    /// `minItems`, if any, and `maxItems` of an array.
    Items(Option<usize>, usize),
}

/// A number within `range`.
pub(crate) fn range<T: Copy + Into<Number>>(range: RangeInclusive<T>) -> Bound {
    Bound::Range((*range.start()).into(), (*range.end()).into())
}

/// A string whose length in characters is within `range`.
pub(crate) fn length(range: RangeInclusive<usize>) -> Bound {
    Bound::Length(*range.start(), *range.end())
}

/// An array with a number of items within `range`.
pub(crate) fn items(range: RangeInclusive<usize>) -> Bound {
    Bound::Items(Some(*range.start()), *range.end())
}

/// An array of at most `max` items.
pub(crate) fn at_most_items(max: usize) -> Bound {
    Bound::Items(None, max)
}

/// A field of a schema and what it may hold.
pub(crate) type FieldBound = ((Cow<'static, str>, &'static str), Bound);

/// `(schema name, field name)` of `Type.field`, which must exist.
macro_rules! field {
    ($ty:ident . $field:ident) => {{
        let _exists = |v: &$ty| {
            let _ = &v.$field;
        };
        (<$ty as utoipa::ToSchema>::name(), stringify!($field))
    }};
}
pub(crate) use field;

/// Sets each bound on its field in `doc`'s schemas.
pub(crate) fn apply(doc: &mut OpenApi, bounds: impl IntoIterator<Item = FieldBound>) {
    let schemas = &mut doc
        .components
        .as_mut()
        .expect("the document has components")
        .schemas;
    for ((schema, field), bound) in bounds {
        let property = match schemas.get_mut(schema.as_ref()) {
            Some(RefOr::T(Schema::Object(object))) => object.properties.get_mut(field),
            _ => None,
        };
        let Some(RefOr::T(property)) = property else {
            panic!("no field {schema}.{field} in the document to bound");
        };
        match (property, bound) {
            (Schema::Object(o), Bound::Range(min, max)) => {
                o.minimum = Some(min);
                o.maximum = Some(max);
            }
            (Schema::Object(o), Bound::Length(min, max)) => {
                o.min_length = Some(min);
                o.max_length = Some(max);
            }
            (Schema::Array(a), Bound::Items(min, max)) => {
                a.min_items = min;
                a.max_items = Some(max);
            }
            _ => panic!("{schema}.{field} is not of the kind its bound is for"),
        }
    }
}

/// The schema of a count in a query string (a page size, a number of
/// instants): an integer from 1 to `max`, `default` when absent.
pub(crate) fn count(max: u32, default: u32) -> Object {
    ObjectBuilder::new()
        .schema_type(Type::Integer)
        .format(Some(SchemaFormat::KnownFormat(KnownFormat::Int32)))
        .default(Some(default.into()))
        .minimum(Some(1))
        .maximum(Some(max))
        .build()
}
