// The control database's schema as an ordered list of migrations. Migration i (0-based) brings the
// schema from version i to version i+1; ControlDb::Open applies the missing ones at start-up, each
// in one transaction together with its row in `schema_migrations`.
//
// Rules for whoever adds a table: append a new Migration at the end of the list in
// migrations.cc; never edit, reorder or remove one that has shipped (databases in the field have
// recorded it by version and name, and Open refuses a history that disagrees with the binary).
//
// PostgreSQL: `sql` is SQLite's and is translated mechanically
// (base::TranslateSqliteDdlForPostgres: INTEGER → BIGINT, BLOB → BYTEA, TEXT → TEXT COLLATE "C",
// INTEGER PRIMARY KEY → an identity key), so plain CREATE TABLE / CREATE INDEX / ALTER TABLE ...
// ADD COLUMN need nothing more. A migration the translation refuses (triggers, INSERT OR ...)
// carries `postgres_sql`, its whole PostgreSQL version, with the same tables, columns, indexes and
// behaviour. ControlMigrationsTest checks that every migration has a PostgreSQL version; the
// PostgreSQL run of the control tests applies them all.
#pragma once

#include <span>
#include <string_view>

namespace sovai::control {

struct Migration {
  // Short snake_case name, recorded in schema_migrations.name and compared on every open.
  std::string_view name;
  // One or more SQL statements, run with Database::Exec inside the migration's transaction.
  std::string_view sql;
  // The PostgreSQL version when `sql` has no mechanical translation; empty = translate `sql`.
  std::string_view postgres_sql = {};
};

// The control plane's migrations, oldest first. Version = index + 1.
std::span<const Migration> ControlMigrations();

}  // namespace sovai::control
