package inboxd

import "testing"

// TestIDField: the payload field an edit-and-retry must keep, from the id-source setting.
func TestIDField(t *testing.T) {
	t.Parallel()
	for setting, want := range map[string]string{"": "id", "payload:id": "id", "payload:eventId": "eventId", "header:message-id": "", "bogus": ""} {
		if got := idField(setting); got != want {
			t.Errorf("idField(%q) = %q, want %q", setting, got, want)
		}
	}
}

// TestPublish: the API publishes to publish-destination, else to the first destination.
func TestPublish(t *testing.T) {
	t.Parallel()
	if got := (Config{PublishDestination: "/topic/VirtualTopic.registrations"}).WithDefaults().publish(); got != "/topic/VirtualTopic.registrations" {
		t.Errorf("publish() = %q, want the publish destination", got)
	}
	if got := (Config{}).WithDefaults().publish(); got != "/queue/registrations" {
		t.Errorf("publish() = %q, want the first destination", got)
	}
}
