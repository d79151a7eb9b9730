// Package adminapi holds the types of Meridian's admin REST API (`/admin/v2`, Pulsar-compatible) and a
// small typed HTTP client for it.
//
// The JSON field names are Pulsar's, exactly as Pulsar's broker writes and reads them (and as the
// pulsaradmin Go package and pulsar-admin send them), so that Pulsar's tools work unchanged against
// Meridian. Field names that differ between Pulsar's Java and Go admin libraries are both accepted where
// Pulsar's broker accepts both. Meridian-only additions are documented on the field and never collide
// with a Pulsar name.
//
// Decoding request bodies: DecodeBody accepts every field name Pulsar defines, even where Meridian
// stores a value without acting on it (pulsaradmin always sends whole objects), and ignores names it
// does not define, as Pulsar does, so newer admin tools keep working.
//
// Nullable policy values are pointers: nil means "not set here" (inherit the broker default or the
// namespace value), which the REST API reports as an empty body with status 204, as Pulsar does.
package adminapi
