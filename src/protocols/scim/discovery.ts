// The discovery documents (RFC 7644 §4, RFC 7643 §5–§7): what identity providers read when a
// connection is set up. The same for every organization.
import { GROUP_SCHEMA, listResponse, USER_SCHEMA } from './wire';

const RESOURCE_TYPE = 'urn:ietf:params:scim:schemas:core:2.0:ResourceType';
const SCHEMA = 'urn:ietf:params:scim:schemas:core:2.0:Schema';

export function serviceProviderConfig(base: string) {
  return {
    schemas: ['urn:ietf:params:scim:schemas:core:2.0:ServiceProviderConfig'],
    documentationUri: `${base}/openapi.json`,
    patch: { supported: true },
    bulk: { supported: false, maxOperations: 0, maxPayloadSize: 0 },
    filter: { supported: true, maxResults: 200 },
    changePassword: { supported: false },
    sort: { supported: false },
    etag: { supported: true },
    authenticationSchemes: [
      {
        type: 'oauthbearertoken',
        name: 'OAuth Bearer Token',
        description: 'A SCIM token (scim_…) created in the web app, sent as Authorization: Bearer.',
        specUri: 'https://www.rfc-editor.org/info/rfc6750',
        primary: true,
      },
    ],
    meta: { resourceType: 'ServiceProviderConfig', location: `${base}/scim/v2/ServiceProviderConfig` },
  };
}

export function resourceTypes(base: string) {
  const type = (name: 'User' | 'Group', schema: string, description: string) => ({
    schemas: [RESOURCE_TYPE],
    id: name,
    name,
    endpoint: `/${name}s`,
    description,
    schema,
    schemaExtensions: [],
    meta: { resourceType: 'ResourceType', location: `${base}/scim/v2/ResourceTypes/${name}` },
  });
  const all = [
    type('User', USER_SCHEMA, 'People of the organization.'),
    type('Group', GROUP_SCHEMA, 'Groups of people, which group mappings turn into roles and teams.'),
  ];
  return listResponse(all.length, 1, all);
}

type Attribute = {
  name: string;
  type: 'string' | 'boolean' | 'complex' | 'reference';
  multiValued: boolean;
  description: string;
  required: boolean;
  caseExact: boolean;
  mutability: 'readOnly' | 'readWrite' | 'immutable';
  returned: 'always' | 'default';
  uniqueness: 'none' | 'server';
  subAttributes?: Attribute[];
  referenceTypes?: string[];
};

const attr = (name: string, description: string, more: Partial<Attribute> = {}): Attribute => ({
  name,
  type: 'string',
  multiValued: false,
  description,
  required: false,
  caseExact: false,
  mutability: 'readWrite',
  returned: 'default',
  uniqueness: 'none',
  ...more,
});

export function schemas(base: string) {
  const user = {
    schemas: [SCHEMA],
    id: USER_SCHEMA,
    name: 'User',
    description: 'A person of the organization.',
    attributes: [
      attr('userName', 'The sign-in name, an email address.', { required: true, uniqueness: 'server' }),
      attr('name', 'The person’s name.', {
        type: 'complex',
        subAttributes: [attr('formatted', 'The full name.'), attr('givenName', 'The given name.'), attr('familyName', 'The family name.')],
      }),
      attr('displayName', 'The name shown for the person.'),
      attr('emails', 'Email addresses.', {
        type: 'complex',
        multiValued: true,
        subAttributes: [
          attr('value', 'The address.'),
          attr('type', 'work, home or other.'),
          attr('primary', 'Whether it is the primary address.', { type: 'boolean' }),
        ],
      }),
      attr('active', 'False for a suspended membership.', { type: 'boolean' }),
      attr('groups', 'The groups the person belongs to.', {
        type: 'complex',
        multiValued: true,
        mutability: 'readOnly',
        subAttributes: [attr('value', 'The group’s id.', { mutability: 'readOnly' }), attr('display', 'The group’s name.', { mutability: 'readOnly' })],
      }),
    ],
    meta: { resourceType: 'Schema', location: `${base}/scim/v2/Schemas/${USER_SCHEMA}` },
  };
  const group = {
    schemas: [SCHEMA],
    id: GROUP_SCHEMA,
    name: 'Group',
    description: 'A group of people of the organization.',
    attributes: [
      attr('displayName', 'The group’s name.', { required: true, uniqueness: 'server' }),
      attr('members', 'The group’s members (people only).', {
        type: 'complex',
        multiValued: true,
        subAttributes: [
          attr('value', 'The person’s id.', { mutability: 'immutable' }),
          attr('display', 'The person’s name.', { mutability: 'readOnly' }),
          attr('type', 'Always User.', { mutability: 'immutable' }),
        ],
      }),
    ],
    meta: { resourceType: 'Schema', location: `${base}/scim/v2/Schemas/${GROUP_SCHEMA}` },
  };
  return listResponse(2, 1, [user, group]);
}
