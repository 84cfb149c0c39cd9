// Type-level checks that the client's camelCase types name exactly the schema's fields.
// A mismatch fails `tsc` (so `npm run build` and `npm test`) and names the fields.

/** `due_at` -> `dueAt`. */
export type Camel<S extends string> = S extends `${infer Head}_${infer Tail}`
  ? `${Head}${Capitalize<Camel<Tail>>}`
  : S;

export type CamelKeys<T> = Camel<keyof T & string>;

/** `true` when A and B hold the same names; else which ones are only in one of them. */
export type SameNames<Client, Schema> = [Exclude<Client, Schema>, Exclude<Schema, Client>] extends [
  never,
  never,
]
  ? true
  : { onlyInClient: Exclude<Client, Schema>; onlyInSchema: Exclude<Schema, Client> };

export type Assert<T extends true> = T;
