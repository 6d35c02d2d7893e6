package inboxd

import "testing"

// TestIDField: the payload field an edit-and-retry must keep, from the id-source setting.
func TestIDField(t *testing.T) {
	for setting, want := range map[string]string{"": "id", "payload:id": "id", "payload:eventId": "eventId", "header:message-id": "", "bogus": ""} {
		if got := idField(setting); got != want {
			t.Errorf("idField(%q) = %q, want %q", setting, got, want)
		}
	}
}
