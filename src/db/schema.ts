import type { ColumnType, Generated, Insertable, Selectable } from 'kysely';

/** Timestamps come back as Date; inserts may leave them to the database default. */
type CreatedAt = ColumnType<Date, Date | string | undefined, never>;
type UpdatedAt = ColumnType<Date, Date | string | undefined, Date | string>;
type Timestamp = ColumnType<Date, Date | string, Date | string>;
type NullableTimestamp = ColumnType<Date | null, Date | string | null | undefined, Date | string | null>;
type Json<T> = ColumnType<T, string, string>;

export interface UsersTable {
  id: string;
  email: string;
  name: string | null;
  avatar_url: string | null;
  is_root_org_staff: ColumnType<boolean, boolean | undefined, boolean>;
  totp_secret_enc: string | null;
  totp_enabled_at: NullableTimestamp;
  created_at: CreatedAt;
  updated_at: UpdatedAt;
}

export interface OrganizationsTable {
  id: string;
  name: string;
  slug: string;
  logo_url: string | null;
  require_mfa: ColumnType<boolean, boolean | undefined, boolean>;
  plan: ColumnType<string, string | undefined, string>;
  created_at: CreatedAt;
  updated_at: UpdatedAt;
}

export type MembershipStatus = 'active' | 'suspended' | 'removed';
export type MembershipVia = 'creator' | 'invite' | 'verified_domain' | 'scim' | 'sso_jit' | 'operator';

export interface MembershipsTable {
  org_id: string;
  user_id: string;
  status: MembershipStatus;
  via: MembershipVia | null;
  joined_at: ColumnType<Date, Date | string | undefined, Date | string>;
  created_at: CreatedAt;
  updated_at: UpdatedAt;
}

export type SystemRoleKey = 'owner' | 'admin' | 'member' | 'billing_admin' | 'auditor';

export interface RolesTable {
  id: string;
  org_id: string;
  name: string;
  description: string | null;
  permissions: string[];
  is_system: boolean;
  system_key: SystemRoleKey | null;
  seat_class: 'billable' | 'free_admin';
  created_at: CreatedAt;
  updated_at: UpdatedAt;
}

export interface RoleAssignmentsTable {
  org_id: string;
  user_id: string;
  role_id: string;
  created_at: CreatedAt;
}

export interface TeamsTable {
  id: string;
  org_id: string;
  name: string;
  description: string | null;
  created_at: CreatedAt;
  updated_at: UpdatedAt;
}

export interface TeamMembersTable {
  team_id: string;
  org_id: string;
  user_id: string;
  created_at: CreatedAt;
}

export interface ApiTokensTable {
  id: string;
  org_id: string;
  user_id: string;
  name: string;
  token_hash: string;
  token_hint: string;
  permissions: string[];
  expires_at: NullableTimestamp;
  last_used_at: NullableTimestamp;
  revoked_at: NullableTimestamp;
  created_at: CreatedAt;
}

export interface SessionsTable {
  id: string;
  user_id: string;
  token_hash: string;
  second_factor_at: NullableTimestamp;
  step_up_at: NullableTimestamp;
  expires_at: Timestamp;
  revoked_at: NullableTimestamp;
  ip: string | null;
  user_agent: string | null;
  created_at: CreatedAt;
  last_seen_at: NullableTimestamp;
}

export interface PasskeysTable {
  id: string;
  user_id: string;
  name: string;
  credential_id: string;
  public_key: string;
  counter: ColumnType<number, number | undefined, number>;
  created_at: CreatedAt;
  last_used_at: NullableTimestamp;
}

export interface NotificationDestinationConfigRow {
  to: string[];
  cc: string[];
  bcc: string[];
  subject_prefix: string | null;
}

export interface NotificationDestinationsTable {
  id: string;
  org_id: string;
  name: string;
  type: 'slack' | 'email';
  config: Json<NotificationDestinationConfigRow>;
  webhook_url_enc: string | null;
  event_types: string[];
  is_active: boolean;
  created_by_user_id: string | null;
  last_test_at: NullableTimestamp;
  last_test_status: 'ok' | 'failed' | null;
  last_test_error: string | null;
  created_at: CreatedAt;
  updated_at: UpdatedAt;
}

export type ActorType = 'user' | 'api_token' | 'scim' | 'system' | 'operator';

export interface AuditLogTable {
  id: string;
  org_id: string | null;
  actor_type: ActorType;
  actor_id: string | null;
  actor_user_id: string | null;
  action: string;
  target_type: string | null;
  target_id: string | null;
  changes: Json<Record<string, unknown>>;
  ip: string | null;
  user_agent: string | null;
  request_id: string | null;
  created_at: CreatedAt;
}

export interface OutboxTable {
  id: string;
  org_id: string;
  event_type: string;
  payload: Json<Record<string, unknown>>;
  created_at: CreatedAt;
  available_at: ColumnType<Date, Date | string | undefined, Date | string>;
  attempts: Generated<number>;
  delivered_at: NullableTimestamp;
  last_error: string | null;
  actor_type: ColumnType<EventActorType, EventActorType | undefined, EventActorType>;
  actor_id: string | null;
}

export type EventActorType = 'user' | 'scim' | 'system';

export type NotificationDeliveryStatus = 'pending' | 'delivered' | 'failed' | 'skipped';

export interface NotificationDeliveriesTable {
  id: string;
  org_id: string;
  destination_id: string;
  event_id: string;
  status: ColumnType<NotificationDeliveryStatus, NotificationDeliveryStatus | undefined, NotificationDeliveryStatus>;
  attempts: Generated<number>;
  last_attempt_at: NullableTimestamp;
  next_attempt_at: NullableTimestamp;
  last_error: string | null;
  delivered_at: NullableTimestamp;
  created_at: CreatedAt;
}

export interface SettingsTable {
  key: string;
  value: Json<unknown>;
  updated_at: UpdatedAt;
}

/** Written by rate-limiter-flexible's RateLimiterPostgres; `expire` is epoch milliseconds. */
export interface RateLimitsTable {
  key: string;
  points: number;
  expire: number | null;
}

export interface Database {
  users: UsersTable;
  organizations: OrganizationsTable;
  memberships: MembershipsTable;
  roles: RolesTable;
  role_assignments: RoleAssignmentsTable;
  teams: TeamsTable;
  team_members: TeamMembersTable;
  api_tokens: ApiTokensTable;
  sessions: SessionsTable;
  passkeys: PasskeysTable;
  notification_destinations: NotificationDestinationsTable;
  audit_log: AuditLogTable;
  outbox: OutboxTable;
  notification_deliveries: NotificationDeliveriesTable;
  settings: SettingsTable;
  rate_limits: RateLimitsTable;
}

export type Row<T extends keyof Database> = Selectable<Database[T]>;
export type NewRow<T extends keyof Database> = Insertable<Database[T]>;
