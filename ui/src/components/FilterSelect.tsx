interface Props<T extends string> {
  label: string;
  value: T | "";
  /** Each choice as [value, what the user reads]. */
  options: [T, string][];
  onChange: (value: T | "") => void;
  testid?: string;
}

/** One filter of a list: "All", or one of its choices. */
export function FilterSelect<T extends string>({ label, value, options, onChange, testid }: Props<T>) {
  return (
    <label>
      <span>{label}</span>
      <select value={value} onChange={(e) => onChange(e.currentTarget.value as T | "")} data-testid={testid}>
        <option value="">All</option>
        {options.map(([v, text]) => (
          <option key={v} value={v}>
            {text}
          </option>
        ))}
      </select>
    </label>
  );
}
